// The HTTP API, called on the origin that served the console: local mode, or
// `dynacron console` in front of a deployed API (which signs each call).
// An API that asks for a key (401) gets one from the person, kept for this tab
// only (sessionStorage), and sent in the header the API reads.

import { askForApiKey } from "./dialogs.js";

const KEY_HEADER = "x-api-key";
const KEY_STORAGE = "dynacron.apiKey";
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

function storedKey() {
  try {
    return window.sessionStorage.getItem(KEY_STORAGE);
  } catch {
    return null;
  }
}

function storeKey(key) {
  try {
    if (key) window.sessionStorage.setItem(KEY_STORAGE, key);
    else window.sessionStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage refused (a private window's policy): the key lasts until reload.
  }
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
    if (body !== undefined) sent["Content-Type"] = "application/json";
    const response = await fetch(url, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
    if (response.status === 401) {
      const problem = await readBody(response);
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

/** Every item of a paginated listing, following next_token up to `maxPages` pages. */
export async function allPages(path, query = {}, maxPages = 20) {
  const items = [];
  let token = null;
  for (let page = 0; page < maxPages; page += 1) {
    const answer = await api("GET", path, { query: { ...query, limit: 100, next_token: token } });
    items.push(...answer.items);
    token = answer.next_token;
    if (!token) return { items, complete: true };
  }
  return { items, complete: false };
}

/** A message for a failed call, for the live region or an alert. */
export function describeError(error) {
  if (error instanceof ApiError) {
    return error.detail ? `${error.title}: ${error.detail}` : error.title;
  }
  return `The API could not be reached (${error.message}). Is dynacron running?`;
}
