// One task: payload and result as JSON, the attempts as a timeline, the cancel request and its
// grace, lineage links, and Cancel / Retry for operators with the API's answer, refusals included.
// Cancel is offered only where a cancel request can do something: the states come from the
// cancellation chart (charts.js, derived from statecharts/ by the service), not from a list here.

import { ApiError, get, parseExact, post } from "./api.js";
import { CHARTS } from "./charts.js";
import { button, el, facts, jsonBlock, notice, replace, taskLink } from "./dom.js";
import { age, between, when, yesNo } from "./format.js";

function stateBadge(state) {
  return el("span", { class: `badge state-${state}`, id: "task-state", "data-field": "state" }, state);
}

function attemptItem(a) {
  const took = between(a.started_at, a.ended_at);
  return el("li", { class: `attempt status-${a.status}`, "data-attempt": a.attempt },
    el("div", { class: "attempt-head" },
      el("strong", {}, `Attempt ${a.attempt}`), " ", el("span", { class: `badge state-${a.status}` }, a.status),
      a.effect_uncertain ? el("span", { class: "badge warn" }, "effect uncertain") : null),
    facts([
      ["Lease", el("span", { class: "mono" }, a.lease_id)],
      ["Started", el("span", { class: "mono" }, when(a.started_at))],
      ["Ended", el("span", { class: "mono" }, a.ended_at ? when(a.ended_at) : "still running")],
      ["Took", age(took)],
      a.error_code ? ["Error code", el("span", { class: "mono", "data-field": "error-code" }, a.error_code)] : null,
      a.error_message ? ["Error message", el("span", { class: "message", "data-field": "error-message" },
        a.error_message)] : null,
      a.retryable !== null ? ["Retryable", yesNo(a.retryable)] : null,
      ["Effect uncertain", yesNo(a.effect_uncertain)],
    ]));
}

function cancelFacts(task) {
  const c = task.cancel;
  if (!c) return el("p", { class: "muted", id: "cancel-info" }, "No cancel requested.");
  const grace = c.grace_expires_at ? between(c.requested_at, c.grace_expires_at) : null;
  return facts([
    ["State", el("span", { class: "badge", "data-field": "cancel-state" }, c.state)],
    ["Requested", el("span", { class: "mono" }, when(c.requested_at))],
    ["By", c.requested_by || "—"],
    ["Reason", c.reason || "—"],
    ["Grace", grace ? `${age(grace)}, until ${when(c.grace_expires_at)}`
      : "none: the task had not started, so it was cancelled at once"],
    ["Resolved", c.resolved_at ? el("span", { class: "mono" }, when(c.resolved_at)) : "not yet"],
  ], { id: "cancel-info" });
}

// Whether a cancel request would change anything: the task is in a state the cancellation
// chart's request acts on, and no request was saved before (a second one changes nothing).
function cancellable(task) {
  const intent = task.cancel ? task.cancel.state : "NONE";
  return CHARTS.cancel.task_states.includes(task.state) && CHARTS.cancel.intent_states.includes(intent);
}

function answerNotice(label, result) {
  if (result instanceof ApiError) return notice(`${label} refused: ${result.summary}`, "error");
  return notice([`${label}: `, result], "ok");
}

// The buttons, built once (a reason being typed survives refreshes); ``show(task)`` hides Cancel
// wherever it could do nothing.
function actions(taskId, { can, say, reload }) {
  const controls = { box: null, show: () => {} };
  if (!can("cancel") && !can("retry")) return controls;
  const box = el("div", { class: "actions", id: "task-actions" });
  controls.box = box;
  if (can("cancel")) {
    const reason = el("input", { id: "cancel-reason", placeholder: "reason (optional)", maxlength: 1024,
      autocomplete: "off" });
    const confirm = button("Confirm cancel", { id: "confirm-cancel", class: "danger" });
    const keep = button("Keep it", { id: "keep" });
    const ask = el("span", { class: "confirm", hidden: true }, reason, confirm, keep);
    const start = button("Cancel…", { id: "cancel", class: "danger" });
    start.addEventListener("click", () => { ask.hidden = false; start.hidden = true; reason.focus(); });
    keep.addEventListener("click", () => { ask.hidden = true; start.hidden = false; });
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      try {
        const done = await post(`/v1/tasks/${encodeURIComponent(taskId)}/cancel`,
          reason.value ? { reason: reason.value } : {});
        say(answerNotice("Cancel", done.cancel_changed
          ? `request saved; the task is now ${done.state}`
          : `nothing to change; the task is ${done.state}`));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        say(answerNotice("Cancel", error));
      }
      confirm.disabled = false;
      ask.hidden = true;
      start.hidden = false;
      await reload();
    });
    // Hidden until the task is loaded and shows it can be cancelled.
    const cancel = el("span", { id: "cancel-controls", hidden: true }, start, ask);
    controls.show = (task) => { cancel.hidden = !cancellable(task); };
    box.append(cancel);
  }
  if (can("retry")) {
    const retry = button("Retry", { id: "retry" });
    retry.addEventListener("click", async () => {
      retry.disabled = true;
      try {
        const made = await post(`/v1/tasks/${encodeURIComponent(taskId)}/retry`);
        say(answerNotice("Retry", [made.created ? "new task " : "already retried as ", taskLink(made.task_id)]));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        say(answerNotice("Retry", error));
      }
      retry.disabled = false;
      await reload();
    });
    box.append(retry);
  }
  return controls;
}

function heading(task) {
  return el("h1", {}, "Task ", el("span", { class: "mono", id: "task-id" }, task.task_id), " ", stateBadge(task.state));
}

function render(task, exact) {
  const outcome = task.outcome;
  return [
    el("section", {}, el("h2", {}, "Task"), facts([
      ["Queue", task.queue],
      ["Kind", el("span", { "data-field": "kind" }, task.kind)],
      ["Priority", task.priority],
      ["Attempts", `${task.attempt} of ${task.max_attempts}`],
      ["Idempotency key", el("span", { class: "mono" }, task.idempotency_key)],
      ["Concurrency key", task.concurrency_key ? `${task.concurrency_key} (limit ${task.concurrency_limit})` : "—"],
      ["Created", el("span", { class: "mono" }, when(task.created_at))],
      ["Due", el("span", { class: "mono" }, when(task.due_at))],
      ["Effect uncertain", yesNo(task.effect_uncertain)],
      ["Retry when uncertain", yesNo(task.retry_uncertain)],
      ["Backoff", `${task.backoff_initial} s × ${task.backoff_factor}, at most ${task.backoff_max} s`],
    ])),
    el("section", { id: "lineage" }, el("h2", {}, "Lineage"), facts([
      ["Retry of", task.retry_of ? taskLink(task.retry_of, { id: "retry-of" }) : "— (an original submission)"],
      ["Retried by", task.retried_by ? taskLink(task.retried_by, { id: "retried-by" }) : "— (not retried by hand)"],
    ])),
    el("section", {}, el("h2", {}, "Cancel request"), cancelFacts(task)),
    el("section", {}, el("h2", {}, "Attempts"), task.attempts.length
      ? el("ol", { class: "timeline", id: "attempts" }, task.attempts.map(attemptItem))
      : el("p", { class: "muted" }, "No attempt has started.")),
    el("section", { id: "outcome" }, el("h2", {}, "Outcome"), outcome ? [
      facts([
        ["Status", el("span", { class: `badge state-${outcome.status}` }, outcome.status)],
        ["Error code", outcome.error_code ?? "—"],
        ["Error message", outcome.error_message
          ? el("span", { class: "message", "data-field": "outcome-message" }, outcome.error_message) : "—"],
        ["Retryable", yesNo(outcome.retryable)],
        ["Effect uncertain", yesNo(outcome.effect_uncertain)],
      ]),
      el("h3", {}, "Result"), jsonBlock(exact.outcome.result, { id: "result" }),
    ] : el("p", { class: "muted" }, "Not finished.")),
    el("section", {}, el("h2", {}, "Payload"), jsonBlock(exact.payload, { id: "payload" })),
  ];
}

export function task(view, params, context) {
  const head = el("div");
  const answer = el("div", { id: "action-answer" });
  const body = el("div");
  const say = (node) => replace(answer, node);
  // Built once: a reason being typed survives the refreshes of what is around it.
  const controls = actions(params.id, { ...context, say, reload: () => refresh() });
  replace(view, head, controls.box, answer, body);

  async function refresh() {
    const { doc, text } = await get(`/v1/tasks/${encodeURIComponent(params.id)}`, { raw: true });
    replace(head, heading(doc));
    controls.show(doc);
    replace(body, render(doc, parseExact(text)));
  }

  return { refresh };
}
