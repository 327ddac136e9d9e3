// The HTTP API, called on the origin that served the console: local mode, or
// `dynacron console` in front of a deployed API (which signs each call).
// An API that asks for a key (401) gets one from the person, kept for this tab
// only (sessionStorage), and sent in the header the API reads.
// Behind `dynacron console`, every call also carries this run's session secret
// in a header: the printed link brings it in its fragment (which no server
// sees), taken here into this tab's storage and out of the address bar before
// anything renders. Never a cookie: a browser attaches cookies to any page's
// requests, and another page cannot add a header to a request here.

import { askForApiKey } from "./dialogs.js";

const KEY_HEADER = "x-api-key";
const KEY_STORAGE = "dynacron.apiKey";
const SESSION_HEADER = "X-Dynacron-Console";
const SESSION_STORAGE = "dynacron.consoleSession";
const SESSION_FRAGMENT = "session";
// The proxy's own 401 (no session) names this scheme; the API's asks for a key.
const SESSION_SCHEME = "DynacronConsole";
// Retry-After is honoured once per call, for at most this long.
const MAX_RATE_LIMIT_WAIT_MS = 5000;

/** The API answered with a problem (RFC 9457): `status`, `title`, `detail`, `errors`. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.title = problem.title || `HTTP ${status}`;
    this.detail = problem.detail || "";
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

function stored(name) {
  try {
    return window.sessionStorage.getItem(name);
  } catch {
    return null;
  }
}

function store(name, value) {
  try {
    if (value) window.sessionStorage.setItem(name, value);
    else window.sessionStorage.removeItem(name);
  } catch {
    // Storage refused (a private window's policy): the value lasts until reload.
  }
}

function storedKey() {
  return stored(KEY_STORAGE);
}

function storeKey(key) {
  store(KEY_STORAGE, key);
}

/** The session secret of the link this tab was opened with, moved out of the address bar. */
function takeSessionFromLink() {
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  const secret = fragment.get(SESSION_FRAGMENT);
  if (!secret) return null;
  store(SESSION_STORAGE, secret);
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
  return secret;
}

const memorySession = takeSessionFromLink();

function session() {
  return stored(SESSION_STORAGE) || memorySession;
}

let memoryKey = null;
let pendingKeyPrompt = null;
// Cancelled once, the prompt stays closed (the pages poll) until asked for again.
let declined = false;

/**
 * One call: `path` is the API's ("/tasks"), `query` an object of parameters
 * (arrays repeat the name), `body` JSON. Resolves to the parsed body (null for
 * 204); rejects with ApiError for a problem answer.
 */
export async function api(method, path, { query, body, headers = {} } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    for (const item of [value].flat()) {
      if (item !== null && item !== undefined && item !== "") url.searchParams.append(name, item);
    }
  }
  let refusedKey = false;
  let waited = false;
  for (;;) {
    const key = memoryKey || storedKey();
    const sent = { Accept: "application/json", ...headers };
    if (key) sent[KEY_HEADER] = key;
    const secret = session();
    if (secret) sent[SESSION_HEADER] = secret;
    if (body !== undefined) sent["Content-Type"] = "application/json";
    const response = await fetch(url, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit", // no cookie: the session travels in its header
      cache: "no-store",
    });
    if (response.status === 401) {
      const problem = await readBody(response);
      const scheme = response.headers.get("WWW-Authenticate") || "";
      if (scheme.startsWith(SESSION_SCHEME)) throw new ApiError(401, problem);
      const entered = await promptForKey(refusedKey || Boolean(key), problem.detail);
      if (entered === null) throw new ApiError(401, problem);
      refusedKey = true;
      continue;
    }
    if (response.status === 429 && !waited) {
      const seconds = Number(response.headers.get("Retry-After") || "1");
      waited = true;
      await new Promise((resolve) =>
        window.setTimeout(resolve, Math.min(MAX_RATE_LIMIT_WAIT_MS, Math.max(1, seconds) * 1000)),
      );
      continue;
    }
    const parsed = await readBody(response);
    if (!response.ok) throw new ApiError(response.status, parsed || {});
    return parsed;
  }
}

async function readBody(response) {
  if (response.status === 204) return null;
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { title: `HTTP ${response.status}`, detail: text.slice(0, 300) };
  }
}

// One prompt at a time: calls that meet a 401 together wait for the same answer.
function promptForKey(refused, detail) {
  if (declined) return Promise.resolve(null);
  if (!pendingKeyPrompt) {
    pendingKeyPrompt = askForApiKey(refused, detail).then((key) => {
      pendingKeyPrompt = null;
      if (key !== null) {
        memoryKey = key;
        storeKey(key);
      } else {
        declined = true;
      }
      document.dispatchEvent(new Event("dynacron:key"));
      return key;
    });
  }
  return pendingKeyPrompt;
}

/** Whether the person cancelled the key prompt (the console then offers it again). */
export function keyDeclined() {
  return declined;
}

/** Let the next call that needs a key ask for one again. */
export function allowKeyPrompt() {
  declined = false;
}

/** Forget the key of this tab (the "Sign out" of a console without accounts). */
export function forgetApiKey() {
  memoryKey = null;
  storeKey(null);
}

export function hasApiKey() {
  return Boolean(memoryKey || storedKey());
}

/** A message for a failed call, for the live region or an alert. */
export function describeError(error) {
  if (error instanceof ApiError) {
    return error.detail ? `${error.title}: ${error.detail}` : error.title;
  }
  return `The API could not be reached (${error.message}). Is dynacron running?`;
}
