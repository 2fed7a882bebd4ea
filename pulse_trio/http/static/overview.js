// Overview: one row per queue with its state (ACTIVE or PAUSED, and Pause / Resume for operators:
// POST /v1/queues/{queue}/pause|resume), counts by state, the oldest READY task's age, what finished
// in the last minutes and a throughput chart over the last hour (GET /v1/overview); then, per
// queue with fairness keys, the keys with the most ready work and their share of recent finishes.

import { ApiError, get, post } from "./api.js";
import { throughputChart } from "./chart.js";
import { button, el, notice, replace, table } from "./dom.js";
import { age, count } from "./format.js";

const STATES = ["SCHEDULED", "READY", "OFFERED", "RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"];

function tasksHref(queue, state) {
  const params = new URLSearchParams({ queue });
  if (state) params.set("state", state);
  return `#/tasks?${params}`;
}

function queueRow(name, q, switchButton) {
  const capped = new Set(q.capped);
  const recent = q.recent;
  const finished = Object.values(recent).reduce((a, b) => a + b, 0);
  return el("tr", { "data-queue": name },
    el("th", { class: "queue" }, el("a", { href: tasksHref(name) }, name),
      el("div", { class: "queue-state" },
        el("span", { class: `badge state-${q.state}`, "data-field": "queue-state" }, q.state), " ",
        switchButton(name, q.state))),
    STATES.map((state) => {
      const n = q.states[state] ?? 0;
      return el("td", { class: `num state-${state}${n ? "" : " zero"}`, "data-state": state },
        n ? el("a", { href: tasksHref(name, state) }, count(n, capped.has(state))) : "0");
    }),
    el("td", { class: "num", "data-field": "oldest-ready" }, age(q.oldest_ready_age_s)),
    el("td", { class: "num", "data-field": "recent",
      title: Object.entries(recent).map(([s, n]) => `${s}: ${n}`).join(", ") },
    `${finished} finished`, el("br"), el("span", { class: recent.FAILED ? "bad-text" : "muted" }, `${recent.FAILED} failed`)),
    el("td", { class: "chart-cell" }, throughputChart(q.per_minute, { label: name })));
}

function share(x) {
  return x === null || x === undefined ? "—" : `${Math.round(x * 100)} %`;
}

function fairnessTable(name, rows) {
  return el("section", { class: "fairness", "data-queue": name },
    el("h2", {}, `Fairness keys in ${name}`),
    table(["Key", "Ready", "Recent finished", "Recent share"], rows.map((r) =>
      el("tr", { "data-key": r.fairness_key },
        el("th", {}, r.keys ? `${r.fairness_key} (${r.keys} keys)` : r.fairness_key),
        el("td", { class: "num", "data-field": "ready" }, String(r.ready)),
        el("td", { class: "num", "data-field": "recent-finished" }, String(r.recent_finished)),
        el("td", { class: "num", "data-field": "recent-share" }, share(r.recent_share))))));
}

export function overview(view, params, { can }) {
  const heading = el("h1", {}, "Queues");
  const intro = el("p", { class: "muted" });
  const answer = el("div", { id: "queue-answer" });
  const body = el("div");
  replace(view, heading, intro, answer, body);

  // Pause stops new offers of the queue on every serve process; running tasks finish, submissions are kept.
  function switchButton(name, state) {
    if (!can("pause")) return null;
    const pausing = state !== "PAUSED";
    const action = pausing ? "pause" : "resume";
    const toggle = button(pausing ? "Pause" : "Resume",
      { class: pausing ? "small danger" : "small", "data-queue-action": action, title: pausing
        ? "Offer none of this queue's tasks to any worker; running tasks finish, submissions are kept"
        : "Offer this queue's tasks again" });
    toggle.addEventListener("click", async () => {
      toggle.disabled = true;
      try {
        const done = await post(`/v1/queues/${encodeURIComponent(name)}/${action}`);
        replace(answer, notice(done.paused
          ? `Queue ${name} is paused: no new task of it goes to a worker; running ones finish.`
          : `Queue ${name} is active again.`, "ok"));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        replace(answer, notice(`${pausing ? "Pause" : "Resume"} refused: ${error.summary}`, "error"));
      }
      await refresh();
    });
    return toggle;
  }

  async function refresh() {
    const data = await get("/v1/overview");
    const names = Object.keys(data.queues);
    replace(intro, `Counts stop at ${data.count_cap} (shown as ${data.count_cap}+). "Recent" is the last `,
      `${Math.round(data.recent_s / 60)} minutes; the chart is one bar per minute over the last hour, `,
      "succeeded in green, every other ending in red.");
    if (!names.length) {
      replace(body, notice("No tasks yet: submit one and it shows here."));
      return;
    }
    const fair = names.filter((name) => (data.queues[name].fairness ?? []).length)
      .map((name) => fairnessTable(name, data.queues[name].fairness));
    replace(body, table(
      ["Queue", ...STATES, "Oldest READY", "Recent", "Last hour"],
      names.map((name) => queueRow(name, data.queues[name], switchButton)),
      { id: "queues" }), ...fair);
  }

  return { refresh };
}
