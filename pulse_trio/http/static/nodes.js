// Nodes: the serve processes and their heartbeats (GET /v1/nodes), and, kept apart, the
// cluster-wide settings when this service has them (GET /v1/settings answers 200).

import { ApiError, get, query } from "./api.js";
import { el, facts, jsonBlock, notice, replace, table } from "./dom.js";
import { age, between, when } from "./format.js";

function row(n) {
  return el("tr", { "data-node": n.node_id },
    el("td", { class: "mono" }, n.node_id),
    el("td", {}, el("span", { class: `badge state-${n.state}`, "data-field": "state" }, n.state)),
    el("td", {}, `${n.host} (pid ${n.pid})`),
    el("td", { class: "mono" }, when(n.started_at)),
    el("td", { class: "num", title: n.heartbeat_at }, `${age(between(n.heartbeat_at))} ago`),
    el("td", { class: "num" }, `${n.lapse_s} s`),
    el("td", { class: "num" }, n.open_sessions),
    el("td", { class: "mono" }, n.lost_at ? [when(n.lost_at), el("div", { class: "muted" }, `by ${n.lost_by}`)]
      : n.stopped_at ? `stopped ${when(n.stopped_at)}` : "—"));
}

/** One cluster setting (GET /v1/settings): its value for people, and who set it. */
function settingValue(s) {
  if (!s || typeof s !== "object" || Array.isArray(s)) return jsonBlock(s);
  const origin = s.state === "SET" ? `set by ${s.updated_by} ${when(s.updated_at)}` : "default";
  return el("span", { "data-setting": s.name },
    el("span", { class: "mono", "data-field": "value" }, s.meaning),
    el("span", { class: "muted" }, ` (${origin})`));
}

/** The settings document, { settings: { name: setting } }, as rows. */
function settingsFacts(doc) {
  const values = doc && typeof doc === "object" && doc.settings && typeof doc.settings === "object" ? doc.settings : doc;
  if (!values || typeof values !== "object" || Array.isArray(values)) return jsonBlock(values);
  return facts(Object.entries(values).map(([name, value]) => [el("span", { class: "mono" }, name), settingValue(value)]));
}

export function nodes(view) {
  const all = el("input", { type: "checkbox", id: "show-stopped" });
  const list = el("div", { id: "node-list" });
  const settingsBody = el("div");
  const settings = el("section", { id: "settings", class: "separate", hidden: true },
    el("h2", {}, "Cluster settings"),
    el("p", { class: "muted" }, "Shared by every serve process, from GET /v1/settings."), settingsBody);
  replace(view, el("h1", {}, "Serve processes"),
    el("p", { class: "filters" }, all, el("label", { for: "show-stopped" }, "Show stopped processes")), list, settings);
  all.addEventListener("change", () => refresh());

  let hasSettings = true; // until GET /v1/settings answers otherwise on this visit of the page

  async function refreshSettings() {
    if (!hasSettings) return;
    try {
      const doc = await get("/v1/settings");
      replace(settingsBody, settingsFacts(doc));
      settings.hidden = false;
    } catch (error) {
      if (!(error instanceof ApiError) || error.status === 401) throw error;
      hasSettings = false; // no settings endpoint on this service (or not for this token): stay hidden
      settings.hidden = true;
    }
  }

  async function refresh() {
    const data = await get(`/v1/nodes${query({ all: all.checked ? "true" : "" })}`);
    replace(list, data.nodes.length
      ? table(["Node", "State", "Host", "Started (UTC)", "Heartbeat", "Lapse", "Open sessions", "Lost / stopped"],
        data.nodes.map(row), { id: "nodes" })
      : notice("No serve process is recorded."));
    await refreshSettings();
  }

  return { refresh };
}
