// Every call the dashboard makes goes through here: the token from sessionStorage as an
// Authorization header (never a cookie), JSON in and out, errors as ApiError with the API's code.

const KEY = "pulse-trio.token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, code, message, field = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field; // 422: the request field at fault
  }

  get summary() {
    return this.status ? `${this.status} ${this.code}: ${this.message}` : this.message;
  }
}

let refused = () => {};

/** Called with the ApiError whenever the API answers 401: the token is unknown or revoked. */
export function onUnauthenticated(handler) {
  refused = handler;
}

/** JSON.parse that keeps every number's digits (1.10 stays 1.10), where the browser can. */
export function parseExact(text) {
  if (typeof JSON.rawJSON !== "function") return JSON.parse(text);
  return JSON.parse(text, (key, value, context) =>
    typeof value === "number" && context && typeof context.source === "string" ? JSON.rawJSON(context.source) : value);
}

/** One API call; resolves to the parsed answer ({doc, text} with `raw`), rejects with ApiError. */
export async function request(method, path, { body, raw = false } = {}) {
  const headers = { Accept: "application/json" };
  const bearer = token.get();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, credentials: "omit", cache: "no-store", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, "unreachable", `the service did not answer (${error.message})`);
  }
  const text = await response.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : null;
  } catch {
    doc = null;
  }
  if (!response.ok) {
    const error = doc && doc.error
      ? new ApiError(response.status, String(doc.error.code), String(doc.error.message),
        typeof doc.error.field === "string" ? doc.error.field : null)
      : new ApiError(response.status, "http_error", text.slice(0, 200) || response.statusText);
    if (response.status === 401) refused(error);
    throw error;
  }
  return raw ? { doc, text } : doc;
}

export const get = (path, options) => request("GET", path, options);
export const post = (path, body = {}, options) => request("POST", path, { ...options, body });

/** A query string from the non-empty values of `params`. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
