// The Weft run viewer: one page for `/` (the runs) and `/runs/ID` (a run),
// reading everything from the coordinator's JSON API (`/api/v1/`). No
// framework and no build step: DOM built with `el`, a run's events read as
// server-sent events over `fetch` (so the bearer token goes as a header),
// the picture redrawn at most a few times a second however fast events come.
"use strict";

const TOKEN_KEY = "weft-token";
const RENDER_EVERY_MS = 200;
const LIST_REFRESH_MS = 2000;
const EVENTS_SHOWN = 500;
const ITEMS_PER_PAGE = 100;

// ---- small helpers ----------------------------------------------------

function el(tag, attrs, ...children) {
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

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function headers(extra) {
  const all = Object.assign({}, extra || {});
  if (token()) all.Authorization = "Bearer " + token();
  return all;
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(path, options) {
  const init = Object.assign({}, options || {});
  init.headers = headers(init.body ? { "Content-Type": "application/json" } : {});
  const response = await fetch("/api/v1" + path, init);
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

function when(ms) { return ms ? new Date(ms).toLocaleString() : ""; }

function duration(from, to) {
  if (!from) return "";
  let seconds = Math.max(0, Math.round(((to || Date.now()) - from) / 1000));
  const hours = Math.floor(seconds / 3600); seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60); seconds -= minutes * 60;
  if (hours) return `${hours}h ${String(minutes).padStart(2, "0")}m`;
  if (minutes) return `${minutes}m ${String(seconds).padStart(2, "0")}s`;
  return `${seconds}s`;
}

function badge(status) { return el("span", { class: "status " + status, text: status }); }

const FOLD_CHARS = 400;

// A JSON value shown whole when short, folded behind its size when long.
function jsonValue(value, opened) {
  const text = JSON.stringify(value, null, 2);
  if (text === undefined) return el("span", { class: "muted", text: "(removed)" });
  if (text.length <= FOLD_CHARS) return el("pre", { class: "value" }, text);
  return el("details", { open: opened || false },
    el("summary", { text: `${describe(value)}, ${text.length.toLocaleString()} characters` }),
    el("pre", { class: "value" }, text));
}

function describe(value) {
  if (Array.isArray(value)) return `list of ${value.length}`;
  if (value && typeof value === "object") return `object of ${Object.keys(value).length} keys`;
  if (typeof value === "string") return "text";
  return typeof value;
}

// ---- the frame: who is looking, and the token form ------------------------

let me = null;

async function boot() {
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  try {
    me = await api("/whoami");
  } catch (error) {
    if (error.status !== 401) showFailure(error);
    return;
  }
  const who = document.getElementById("who");
  who.textContent = me.identities_required ? `${me.name} (${me.role}, ${me.namespace})` : "";
  document.getElementById("sign-out").hidden = !token();
  const match = location.pathname.match(/^\/runs\/([^/]+)$/);
  if (match) runPage(decodeURIComponent(match[1]));
  else listPage();
}

function main(...children) {
  const root = document.getElementById("main");
  root.replaceChildren(...children);
  return root;
}

function showFailure(error) {
  main(el("div", { class: "panel error-box", id: "failure" }, error.message));
}

let signInShown = false;

function showSignIn(reason) {
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

const timers = new Set();
const streams = new Set();

function stopEverything() {
  for (const timer of timers) clearInterval(timer);
  timers.clear();
  for (const controller of streams) controller.abort();
  streams.clear();
}

// Every script of the page is in by now (they load in order at the end of
// the body): start.
document.addEventListener("DOMContentLoaded", boot);
