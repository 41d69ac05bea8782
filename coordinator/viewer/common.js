// The Weft run viewer's shared helpers (an ES module, as every script of
// the page): DOM built with `el`, the JSON API with the bearer token, the
// frame (sign-in, failures), and the timers and streams a page stops when
// it leaves. The page starts in main.js; no framework and no build step.

export const TOKEN_KEY = "weft-token";
export const RENDER_EVERY_MS = 200;
export const LIST_REFRESH_MS = 2000;
export const EVENTS_SHOWN = 500;
export const ITEMS_PER_PAGE = 100;

// ---- small helpers ----------------------------------------------------

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function token() { return sessionStorage.getItem(TOKEN_KEY); }

export function headers(extra) {
  const all = Object.assign({}, extra || {});
  if (token()) all.Authorization = "Bearer " + token();
  return all;
}

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// How many times, and how long apart, a read is sent when the network
// fails it (not when the coordinator answers it, whatever the answer).
const READ_TRIES = 4;
const READ_RETRY_MS = 250;

// `fetch`, sent again after a network failure when it is a read (GET): a
// browser abandons the requests in flight when the machine's network
// changes, and a read may be repeated. An action (POST, DELETE) is not:
// it fails with the browser's reason, and the user decides.
export async function request(url, init) {
  const method = ((init && init.method) || "GET").toUpperCase();
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetch(url, init);
    } catch (error) {
      const aborted = init && init.signal && init.signal.aborted;
      if (method !== "GET" || aborted || attempt >= READ_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, READ_RETRY_MS * attempt));
    }
  }
}

export async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = headers(init.body ? { "Content-Type": "application/json" } : {});
  const response = await request("/api/v1" + path, init);
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!response.ok) {
    const error = (body && body.error) || { code: "http_" + response.status, message: text || response.statusText };
    if (response.status === 401) { showSignIn(error.message); }
    throw new ApiError(response.status, error.code, error.message);
  }
  return body;
}

export function when(ms) { return ms ? new Date(ms).toLocaleString() : ""; }

export function duration(from, to) {
  if (!from) return "";
  let seconds = Math.max(0, Math.round(((to || Date.now()) - from) / 1000));
  const hours = Math.floor(seconds / 3600); seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60); seconds -= minutes * 60;
  if (hours) return `${hours}h ${String(minutes).padStart(2, "0")}m`;
  if (minutes) return `${minutes}m ${String(seconds).padStart(2, "0")}s`;
  return `${seconds}s`;
}

export function badge(status) { return el("span", { class: "status " + status, text: status }); }

const FOLD_CHARS = 400;

// A JSON value shown whole when short, folded behind its size when long.
export function jsonValue(value, opened) {
  const text = JSON.stringify(value, null, 2);
  if (text === undefined) return el("span", { class: "muted", text: "(removed)" });
  if (text.length <= FOLD_CHARS) return el("pre", { class: "value" }, text);
  return el("details", { open: opened || false },
    el("summary", { text: `${describe(value)}, ${text.length.toLocaleString()} characters` }),
    el("pre", { class: "value" }, text));
}

export function describe(value) {
  if (Array.isArray(value)) return `list of ${value.length}`;
  if (value && typeof value === "object") return `object of ${Object.keys(value).length} keys`;
  if (typeof value === "string") return "text";
  return typeof value;
}

// ---- the frame: who is looking, and the token form ------------------------

// Who is looking (`/whoami`), once main.js has asked.
export const session = { me: null };

export function main(...children) {
  const root = document.getElementById("main");
  root.replaceChildren(...children);
  return root;
}

export function showFailure(error) {
  main(el("div", { class: "panel error-box", id: "failure" }, error.message));
}

let signInShown = false;

export function showSignIn(reason) {
  if (signInShown) return;
  signInShown = true;
  stopEverything();
  const input = el("input", { id: "token", type: "password", autocomplete: "off", placeholder: "token" });
  const message = el("div", { id: "sign-in-error", class: "form-error" }, token() ? reason : "");
  const submit = (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    location.reload();
  };
  main(el("form", { class: "panel signin", onsubmit: submit },
    el("h1", { text: "Sign in" }),
    el("p", { class: "muted", text: "This coordinator wants a token (reader to look, operator to act). It is kept for this browser tab's session only." }),
    input, el("button", { class: "primary", id: "sign-in", type: "submit", text: "Sign in" }), message));
  if (token()) sessionStorage.removeItem(TOKEN_KEY);
  input.focus();
}

export const timers = new Set();
export const streams = new Set();

export function stopEverything() {
  for (const timer of timers) clearInterval(timer);
  timers.clear();
  for (const controller of streams) controller.abort();
  streams.clear();
}
