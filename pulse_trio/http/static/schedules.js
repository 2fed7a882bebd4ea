// Schedules: every recurring schedule with its rule, next tick and latest task (GET /v1/schedules),
// and for operators a form to create one and Pause / Resume / Delete buttons. A field the API
// refuses (422) is named next to the form; nothing is checked here that the API does not check again.

import { ApiError, get, post, query, request } from "./api.js";
import { button, el, notice, replace, table, taskLink } from "./dom.js";
import { when } from "./format.js";

const FIELD_INPUTS = ["name", "queue", "kind", "cron", "interval", "timezone", "missed", "catch_up_limit",
  "payload"];

function input(name, label, attributes = {}) {
  return el("p", { class: "field" }, el("label", { for: `schedule-${name}` }, label),
    el("input", { id: `schedule-${name}`, name, autocomplete: "off", spellcheck: "false", ...attributes }));
}

function createForm(onCreated, say) {
  const missed = el("select", { id: "schedule-missed", name: "missed" },
    el("option", { value: "skip" }, "skip: only the current tick"),
    el("option", { value: "catch_up" }, "catch_up: the latest missed ticks"));
  const form = el("form", { id: "schedule-form", autocomplete: "off" },
    el("h2", {}, "New schedule"),
    input("name", "Name", { required: true, maxlength: "64" }),
    input("queue", "Queue", { required: true, maxlength: "64" }),
    input("kind", "Kind", { required: true, maxlength: "64" }),
    input("cron", "Cron (minute hour day month weekday)", { placeholder: "30 2 * * *" }),
    input("interval", "or every N seconds", { placeholder: "300" }),
    input("timezone", "Time zone (IANA)", { value: "UTC" }),
    el("p", { class: "field" }, el("label", { for: "schedule-missed" }, "Missed ticks"), missed),
    input("catch_up_limit", "Catch up at most (with catch_up)", { placeholder: "10" }),
    input("payload", "Payload (JSON)", { value: "{}" }),
    button("Create schedule", { type: "submit", id: "schedule-create" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = (name) => form.elements[name].value.trim();
    const body = { name: value("name"), queue: value("queue"), kind: value("kind"), timezone: value("timezone"),
      missed: value("missed") };
    if (value("cron")) body.cron = value("cron");
    if (value("interval")) body.interval = Number(value("interval"));
    if (value("catch_up_limit")) body.catch_up_limit = Number(value("catch_up_limit"));
    try {
      body.payload = JSON.parse(value("payload") || "{}");
    } catch {
      say(notice("payload: is not JSON", "error"), "payload");
      return;
    }
    try {
      const made = await post("/v1/schedules", body);
      say(notice(["Created ", made.name, `: next tick ${when(made.next_fire_at)} UTC.`], "ok"));
      form.reset();
      await onCreated();
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      say(notice(`Not created: ${error.summary}`, "error"), error.field);
    }
  });
  return form;
}

export function schedules(view, params, { can }) {
  const answer = el("div", { id: "schedule-answer", "aria-live": "polite" });
  const all = el("input", { type: "checkbox", id: "show-deleted" });
  const list = el("div", { id: "schedule-list" });

  function say(node, field) {
    replace(answer, node);
    for (const name of FIELD_INPUTS) {
      const box = document.getElementById(`schedule-${name}`);
      if (box) box.setAttribute("aria-invalid", name === field ? "true" : "false");
    }
  }

  replace(view, el("h1", {}, "Schedules"),
    el("p", { class: "filters" }, all, el("label", { for: "show-deleted" }, "Show deleted schedules")),
    answer, list, can("schedule") ? createForm(() => refresh(), say) : null);
  all.addEventListener("change", () => refresh());

  function action(s, name, label, kind) {
    const control = button(label, { class: kind, [`data-${name}`]: s.schedule_id });
    control.addEventListener("click", async () => {
      control.disabled = true;
      try {
        const path = `/v1/schedules/${encodeURIComponent(s.schedule_id)}`;
        const done = name === "delete" ? await request("DELETE", path) : await post(`${path}/${name}`);
        say(notice([`${label}: `, done.name, ` is ${done.state}.`], "ok"));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        say(notice(`${label} refused: ${error.summary}`, "error"));
      }
      await refresh();
    });
    return control;
  }

  function actions(s) {
    if (!can("schedule") || s.state === "DELETED") return null;
    return [s.state === "ACTIVE" ? action(s, "pause", "Pause", "") : action(s, "resume", "Resume", ""), " ",
      action(s, "delete", "Delete", "danger")];
  }

  function row(s) {
    return el("tr", { "data-schedule": s.schedule_id },
      el("td", {}, el("div", { class: "name", "data-field": "name" }, s.name),
        el("div", { class: "mono muted" }, s.schedule_id)),
      el("td", {}, el("span", { class: `badge state-${s.state}`, "data-field": "state" }, s.state)),
      el("td", { class: "mono" }, s.queue, el("div", { class: "muted" }, s.kind)),
      el("td", { class: "mono", "data-field": "rule" }, s.cron ?? `every ${s.interval} s`,
        el("div", { class: "muted" }, s.timezone)),
      el("td", {}, s.missed === "catch_up" ? `catch up ≤ ${s.catch_up_limit}` : "skip"),
      el("td", { class: "mono", "data-field": "next" }, s.next_fire_at ? when(s.next_fire_at) : "—"),
      el("td", { class: "mono" }, s.last_tick_at ? when(s.last_tick_at) : "—",
        s.last_task_id ? el("div", {}, taskLink(s.last_task_id)) : null),
      el("td", { class: "num", "data-field": "fired" }, s.fired_ticks),
      el("td", {}, actions(s)));
  }

  async function refresh() {
    const data = await get(`/v1/schedules${query({ all: all.checked ? "true" : "" })}`);
    replace(list, data.schedules.length
      ? table(["Schedule", "State", "Queue / kind", "Rule", "Missed ticks", "Next tick (UTC)", "Last tick (UTC)",
        "Fired", ""], data.schedules.map(row), { id: "schedules" })
      : notice("No schedule yet."));
  }

  return { refresh };
}
