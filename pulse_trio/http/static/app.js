// The dashboard's shell: sign-in, the routes, and the refresh loop (polling, pausable).
// It adds no rule of its own: what the token may do comes from GET /v1/whoami, and every action
// is an API call that the API authorizes again.

import { ApiError, get, onUnauthenticated, token } from "./api.js";
import { el, notice, replace } from "./dom.js";
import { overview } from "./overview.js";
import { task } from "./task.js";
import { tasks } from "./tasks.js";
import { nodes } from "./nodes.js";
import { schedules } from "./schedules.js";
import { workers } from "./workers.js";

const REFRESH_MS = 3000;
const $ = (id) => document.getElementById(id);

const shell = {
  session: null, // the whoami answer
  current: null, // { refresh } of the page shown
  paused: false,
  timer: null,
  generation: 0, // bumped on every navigation, so a late answer never paints over a newer page
};

const can = (action) => Boolean(shell.session && shell.session.may.includes(action));
const go = (hash) => { location.hash = hash; };

const PAGES = {
  overview: { build: overview },
  tasks: { build: tasks },
  task: { build: task },
  workers: { build: workers, may: "workers" },
  nodes: { build: nodes, may: "nodes" },
  schedules: { build: schedules, may: "schedules" },
};

// Only PAGES' own names are pages: "constructor" or "__proto__" is found on every object too, and
// would be taken for a page that has nothing to build.
function parseHash() {
  const [path, search = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, id] = path.split("/");
  const params = Object.fromEntries(new URLSearchParams(search));
  if (page === "task" && id) params.id = decoded(id);
  return { page: Object.hasOwn(PAGES, page) ? page : "overview", params };
}

// A hand-edited id whose "%" escapes nothing is kept as typed: the API then answers that no such
// task exists, where a throw here would leave the page as it was.
function decoded(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

// -- signing in and out -------------------------------------------------------------------------

function showSignIn(message) {
  stopRefreshing();
  shell.session = null;
  shell.current = null;
  $("bar").hidden = true;
  $("who").hidden = true;
  $("app").hidden = true;
  $("signin").hidden = false;
  const box = $("signin-message");
  box.hidden = !message;
  replace(box, message || "");
  $("token").value = "";
  $("token").focus();
}

function describeSession(me) {
  const queues = me.queues.includes("*") ? "every queue" : `queues ${me.queues.join(", ")}`;
  const operatorOnly = ["cancel", "retry", "workers", "drain", "nodes", "schedule"].filter((a) => !me.may.includes(a));
  replace($("who"),
    "Signed in with ", el("strong", { "data-field": "role" }, me.role), " token ",
    el("span", { class: "mono" }, me.token_id), me.label ? [" (", me.label, ")"] : null, ` for ${queues}. `,
    "It may: ", el("span", { id: "may" }, me.may.join(", ")), ".",
    operatorOnly.length ? el("span", { class: "muted" }, ` Not: ${operatorOnly.join(", ")} (operator only).`) : null);
}

async function signIn(candidate, { remembered = false } = {}) {
  token.set(candidate);
  let me;
  try {
    me = await get("/v1/whoami");
  } catch (error) {
    if (remembered && error instanceof ApiError && error.status !== 401 && error.status !== 403) {
      checkAgainLater(candidate, error); // the service or its database is away, not the token
      return;
    }
    token.clear();
    if (!(error instanceof ApiError)) throw error;
    const why = error.status === 401
      ? `This token was refused: ${error.message}. Check it, or make a new one with pulse-trio token create.`
      : error.status === 403
        ? `This token cannot use the dashboard: ${error.message}.`
        : `Could not sign in: ${error.summary}`;
    showSignIn(remembered ? `Your session ended. ${why}` : why);
    return;
  }
  shell.session = me;
  describeSession(me);
  for (const link of document.querySelectorAll("#nav a[data-may]")) link.hidden = !can(link.dataset.may);
  $("signin").hidden = true;
  $("bar").hidden = false;
  $("who").hidden = false;
  $("app").hidden = false;
  await show();
}

// A remembered token that could not be checked (503 database_unavailable, the service unreachable) is
// kept: only an unknown, revoked or worker token sends you back to sign-in. The banner says why, as a
// refresh's does, and the token is checked again after a refresh's interval unless you sign out first.
function checkAgainLater(candidate, error) {
  stopRefreshing();
  shell.session = null;
  shell.current = null;
  for (const link of document.querySelectorAll("#nav a[data-may]")) link.hidden = true;
  $("signin").hidden = true;
  $("who").hidden = true;
  $("bar").hidden = false;
  $("app").hidden = false;
  replace($("view"), "");
  banner(`The service answered: ${error.summary}`);
  shell.timer = setTimeout(() => {
    shell.timer = null;
    if (token.get() === candidate) signIn(candidate, { remembered: true });
  }, REFRESH_MS);
}

onUnauthenticated((error) => {
  token.clear();
  showSignIn(`Your token is no longer accepted (${error.message}). Sign in again.`);
});

// -- pages and the refresh loop --------------------------------------------------------------

function banner(text) {
  const box = $("banner");
  box.hidden = !text;
  replace(box, text || "");
}

async function refreshNow(generation) {
  if (!shell.current) return;
  try {
    await shell.current.refresh();
    if (generation !== shell.generation) return;
    banner("");
    replace($("refresh-state"), `Updated ${new Date().toLocaleTimeString()}${shell.paused ? " · paused" : ""}`);
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (error.status === 401 || generation !== shell.generation) return; // back at sign-in already
    banner(`The service answered: ${error.summary}`);
  }
}

function stopRefreshing() {
  clearTimeout(shell.timer);
  shell.timer = null;
}

function schedule() {
  stopRefreshing();
  const generation = shell.generation;
  shell.timer = setTimeout(async () => {
    if (!shell.paused && !document.hidden) await refreshNow(generation);
    if (generation === shell.generation && shell.session) schedule();
  }, REFRESH_MS);
}

async function show() {
  if (!shell.session) return;
  const { page, params } = parseHash();
  const generation = ++shell.generation;
  const entry = PAGES[page];
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === (page === "task" ? "tasks" : page)) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const view = $("view");
  banner("");
  if (entry.may && !can(entry.may)) {
    shell.current = null;
    replace(view, notice(`A ${shell.session.role} token cannot see this page.`, "error"));
    return;
  }
  shell.current = entry.build(view, params, { can, go, session: shell.session });
  await refreshNow(generation);
  schedule();
}

function setPaused(paused) {
  shell.paused = paused;
  const toggle = $("pause");
  toggle.setAttribute("aria-pressed", paused ? "true" : "false");
  replace(toggle, paused ? "Resume refresh" : "Pause refresh");
  replace($("refresh-state"), paused ? "Refresh paused" : "Refresh on");
  if (!paused) refreshNow(shell.generation);
}

function start() {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const candidate = $("token").value.trim();
    if (candidate) signIn(candidate);
  });
  $("sign-out").addEventListener("click", () => {
    token.clear();
    showSignIn("Signed out.");
  });
  $("pause").addEventListener("click", () => setPaused(!shell.paused));
  window.addEventListener("hashchange", () => show());
  const remembered = token.get();
  if (remembered) signIn(remembered, { remembered: true });
  else showSignIn("");
}

start();
