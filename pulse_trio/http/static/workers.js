// Workers: each instance with its session, subscriptions, capacity, active leases, drain state and
// the serve node holding it (GET /v1/workers), and Drain for operators (POST .../drain).

import { ApiError, get, post, query } from "./api.js";
import { button, el, notice, replace, table } from "./dom.js";
import { when } from "./format.js";

function subscriptions(list) {
  return list.map((s) => el("div", { class: "mono" }, s.queue, s.kinds ? `: ${s.kinds.join(", ")}` : ": every kind"));
}

export function workers(view, params, { can }) {
  const answer = el("div", { id: "drain-answer" });
  const say = (node) => replace(answer, node);
  const all = el("input", { type: "checkbox", id: "show-disconnected" });
  const list = el("div", { id: "worker-list" });
  replace(view, el("h1", {}, "Workers"),
    el("p", { class: "filters" }, all, el("label", { for: "show-disconnected" }, "Show disconnected instances")),
    answer, list);
  all.addEventListener("change", () => refresh());

  function drainButton(w) {
    if (!can("drain") || w.state !== "ACTIVE") return null;
    const drain = button("Drain", { class: "danger", "data-drain": w.instance_id });
    drain.addEventListener("click", async () => {
      drain.disabled = true;
      try {
        const done = await post(`/v1/workers/${encodeURIComponent(w.instance_id)}/drain`);
        say(notice(["Drain: ", done.worker_name, ` is now ${done.state}; its ${done.active_leases} active `,
          "lease(s) continue, no new task goes to it."], "ok"));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        say(notice(`Drain refused: ${error.summary}`, "error"));
      }
      await refresh();
    });
    return drain;
  }

  function row(w) {
    return el("tr", { "data-instance": w.instance_id },
      el("td", {}, el("div", { class: "name", "data-field": "worker-name" }, w.worker_name),
        el("div", { class: "mono muted" }, w.instance_id)),
      el("td", {}, el("span", { class: `badge state-${w.state}`, "data-field": "state" }, w.state)),
      el("td", {}, subscriptions(w.subscriptions)),
      el("td", { class: "num" }, w.capacity),
      el("td", { class: "num", "data-field": "active-leases" }, w.active_leases),
      el("td", {}, w.drain ? "draining" : "no"),
      el("td", { class: "mono" }, w.node_id ?? "—"),
      el("td", { class: "mono" }, el("div", {}, w.session_id), el("div", { class: "muted" }, `epoch ${w.epoch}`)),
      el("td", { class: "mono" }, when(w.registered_at), w.disconnected_at
        ? el("div", { class: "muted" }, `gone ${when(w.disconnected_at)}`) : null),
      el("td", {}, drainButton(w)));
  }

  async function refresh() {
    const data = await get(`/v1/workers${query({ all: all.checked ? "true" : "" })}`);
    replace(list, data.workers.length
      ? table(["Worker", "State", "Subscriptions", "Capacity", "Active leases", "Drain", "Serve node", "Session",
        "Registered (UTC)", ""], data.workers.map(row), { id: "workers" })
      : notice("No worker is connected."));
  }

  return { refresh };
}
