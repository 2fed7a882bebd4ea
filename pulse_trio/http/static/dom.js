// Building the page from untrusted data: every value becomes a text node, never markup.
// Nothing here parses HTML (the page's Trusted Types policy would refuse it anyway), links are
// only ever in-app "#/..." routes, and invisible controls are shown as visible markers.

// Controls (tab and newline excepted), format characters, line and paragraph separators and the
// Hangul fillers that render blank: a worker name with U+202E must not read backwards, nor hide
// what follows it, and "admin" followed by a zero-width space must not pass for "admin".
const INVISIBLE = /(?![\t\n])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\u115F\u1160\u3164\uFFA0]/u;
const INVISIBLE_ALL = new RegExp(INVISIBLE.source, "gu");

const ATTRIBUTES = new Set([
  "class", "id", "type", "name", "value", "placeholder", "for", "title", "role", "colspan", "autocomplete",
  "spellcheck", "required", "disabled", "hidden", "checked", "list", "dir", "aria-label", "aria-live",
  "aria-current", "aria-pressed", "maxlength",
]);
const SVG_ATTRIBUTES = new Set(["class", "viewBox", "width", "height", "x", "y", "role", "aria-label",
  "preserveAspectRatio"]);
const SVG = "http://www.w3.org/2000/svg";

export function codePoint(char) {
  return "U+" + char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
}

/** The text with every invisible control replaced by its code point, for places that take a string. */
export function visible(text) {
  return String(text).replace(INVISIBLE_ALL, (char) => `[${codePoint(char)}]`);
}

/** Text nodes for `text`, with each invisible control as a visible, marked "U+202E" chip. */
export function textFragment(text) {
  const fragment = document.createDocumentFragment();
  let rest = String(text);
  for (let match = INVISIBLE.exec(rest); match; match = INVISIBLE.exec(rest)) {
    if (match.index) fragment.append(document.createTextNode(rest.slice(0, match.index)));
    const chip = document.createElement("span");
    chip.className = "ctl";
    chip.title = "an invisible character, shown by its code point";
    chip.textContent = codePoint(match[0]);
    fragment.append(chip);
    rest = rest.slice(match.index + match[0].length);
  }
  if (rest) fragment.append(document.createTextNode(rest));
  return fragment;
}

/** Append children: strings and numbers as text, nodes as they are, arrays flattened, null skipped. */
export function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.append(child);
    else node.append(textFragment(String(child)));
  }
  return node;
}

export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

function setAttributes(node, attributes, allowed) {
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "href") {
      node.setAttribute("href", route(value));
    } else if (allowed.has(name) || name.startsWith("data-")) {
      node.setAttribute(name, value === true ? "" : visible(value));
    } else {
      throw new Error(`the dashboard never sets attribute ${name}`);
    }
  }
}

/** An element with checked attributes (no event handlers, no style) and text or node children. */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attributes, ATTRIBUTES);
  return append(node, children);
}

export function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  setAttributes(node, attributes, SVG_ATTRIBUTES);
  return append(node, children);
}

/** Only in-app routes are ever links: never a URL taken from data (no javascript:, no elsewhere). */
export function route(href) {
  if (typeof href !== "string" || !href.startsWith("#/")) throw new Error("the dashboard links only to its own pages");
  return href;
}

const TASK_ID = /^tsk_[0-7][0-9A-HJKMNP-TV-Z]{25}$/;

export function isTaskId(value) {
  return typeof value === "string" && TASK_ID.test(value);
}

/** A link to a task's page, or the value as plain text if it is not a task id. */
export function taskLink(id, attributes = {}) {
  if (!isTaskId(id)) return el("span", { class: "mono" }, id ?? "");
  return el("a", { href: `#/task/${encodeURIComponent(id)}`, class: "mono", ...attributes }, id);
}

/** A JSON value as indented text in a <pre>: markup in it stays characters. */
export function jsonBlock(value, attributes = {}) {
  const text = value === undefined ? "" : JSON.stringify(value, null, 2);
  return el("pre", { class: "json", ...attributes }, text);
}

/** A two-column table of [label, value] rows (value: text or node). */
export function facts(rows, attributes = {}) {
  return el("table", { class: "facts", ...attributes },
    el("tbody", {}, rows.filter(Boolean).map(([label, value]) => el("tr", {}, el("th", {}, label), el("td", {}, value)))));
}

/** A table with a header row and one row per item. */
export function table(headers, rows, attributes = {}) {
  return el("table", { class: "grid", ...attributes },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

export function button(label, attributes = {}) {
  return el("button", { type: "button", ...attributes }, label);
}

export function notice(text, kind = "info") {
  return el("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}
