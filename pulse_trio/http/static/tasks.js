// Tasks: filter by queue, state and kind, newest first, with the API's keyset cursor; look a task
// up by id or by idempotency key (GET /v1/tasks, GET /v1/tasks/{id}).

import { ApiError, get, query } from "./api.js";
import { el, isTaskId, notice, replace, table, taskLink } from "./dom.js";
import { when } from "./format.js";

const STATES = ["SCHEDULED", "READY", "OFFERED", "RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "CANCELLED"];
const PAGE = 50;

function hashFor(params) {
  const search = new URLSearchParams();
  for (const name of ["queue", "state", "kind", "cursor"]) if (params[name]) search.set(name, params[name]);
  const text = search.toString();
  return text ? `#/tasks?${text}` : "#/tasks";
}

function filterForm(params, go) {
  const queue = el("input", { id: "filter-queue", name: "queue", value: params.queue || "", placeholder: "any",
    spellcheck: "false", autocomplete: "off" });
  const kind = el("input", { id: "filter-kind", name: "kind", value: params.kind || "", placeholder: "any",
    spellcheck: "false", autocomplete: "off" });
  const state = el("select", { id: "filter-state", name: "state" }, el("option", { value: "" }, "any"),
    STATES.map((s) => el("option", { value: s }, s)));
  state.value = params.state || "";
  const form = el("form", { class: "filters", id: "filters" },
    el("label", { for: "filter-queue" }, "Queue"), queue,
    el("label", { for: "filter-state" }, "State"), state,
    el("label", { for: "filter-kind" }, "Kind"), kind,
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go(hashFor({ queue: queue.value.trim(), state: state.value, kind: kind.value.trim() }));
  });
  return form;
}

function lookupForm(params, go, say) {
  const input = el("input", { id: "lookup", name: "lookup", placeholder: "tsk_… or an idempotency key",
    spellcheck: "false", autocomplete: "off", maxlength: 255 });
  const form = el("form", { class: "filters", id: "lookup-form" },
    el("label", { for: "lookup" }, "Find"), input, el("button", { type: "submit" }, "Look up"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const wanted = input.value.trim();
    if (!wanted) return;
    if (isTaskId(wanted)) {
      go(`#/task/${encodeURIComponent(wanted)}`);
      return;
    }
    try {
      const page = await get(`/v1/tasks${query({ idempotency_key: wanted, queue: params.queue, limit: 2 })}`);
      if (page.tasks.length === 1) go(`#/task/${encodeURIComponent(page.tasks[0].task_id)}`);
      else if (!page.tasks.length) say(notice(["No task was submitted with idempotency key ", el("q", {}, wanted),
        params.queue ? ` in queue ${params.queue}.` : "."], "error"));
      else say(notice("That key was used in several queues: filter by queue first.", "error"));
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      say(notice(`Look-up refused: ${error.summary}`, "error"));
    }
  });
  return form;
}

function taskRow(task) {
  return el("tr", { "data-task": task.task_id },
    el("td", {}, taskLink(task.task_id)),
    el("td", {}, task.queue),
    el("td", { class: "kind" }, task.kind),
    el("td", {}, el("span", { class: `badge state-${task.state}`, "data-field": "state" }, task.state)),
    el("td", { class: "num" }, task.priority),
    el("td", { class: "num" }, task.attempt),
    el("td", { class: "mono" }, when(task.created_at)));
}

export function tasks(view, params, { go }) {
  const message = el("div", { id: "lookup-message" });
  const say = (node) => replace(message, node);
  const results = el("div", { id: "task-list" });
  const pager = el("nav", { class: "pager", "aria-label": "pages" });
  replace(view, el("h1", {}, "Tasks"), filterForm(params, go), lookupForm(params, go, say), message, results, pager);

  async function refresh() {
    const page = await get(`/v1/tasks${query({ queue: params.queue, state: params.state, kind: params.kind,
      cursor: params.cursor, order: "newest", limit: PAGE })}`);
    replace(results, page.tasks.length
      ? table(["Task", "Queue", "Kind", "State", "Priority", "Attempt", "Created (UTC)"], page.tasks.map(taskRow),
        { id: "tasks" })
      : notice(params.cursor ? "No older tasks." : "No task matches."));
    replace(pager,
      params.cursor ? el("a", { href: hashFor({ ...params, cursor: "" }), id: "newest" }, "← Newest") : null,
      page.next ? el("a", { href: hashFor({ ...params, cursor: page.next }), id: "older" }, "Older →") : null,
      el("span", { class: "muted" }, params.cursor
        ? "Newest first, from past the cursor: tasks added meanwhile appear on the first page."
        : "Newest first; new tasks appear at the top."));
  }

  return { refresh };
}
