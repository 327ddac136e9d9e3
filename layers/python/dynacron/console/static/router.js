// Moving between console pages: helpers the pages use; app.js does the rendering.

export const BASE = "/console";

/** Go to a console page (a path under /console, with its query), as a link does. */
export function navigate(path, { replace = false } = {}) {
  if (replace) window.history.replaceState(null, "", path);
  else window.history.pushState(null, "", path);
  window.dispatchEvent(new Event("dynacron:navigate"));
}

/** Render the current page again from scratch (its data read anew). */
export function reload() {
  window.dispatchEvent(new Event("dynacron:reload"));
}

/** Put `params` into the address bar's query without a new history entry or a new render. */
export function setQuery(params) {
  const url = new URL(window.location.href);
  url.search = "";
  for (const [name, value] of Object.entries(params)) {
    if (value) url.searchParams.set(name, value);
  }
  window.history.replaceState(null, "", url.pathname + url.search);
  window.dispatchEvent(new Event("dynacron:query"));
}

/** The page's title, in the tab and for assistive technology. */
export function setTitle(text) {
  document.title = `${text} · dynacron`;
}

/** The path of a task's page. */
export function taskPath(taskId) {
  return `${BASE}/tasks/${encodeURIComponent(taskId)}`;
}

/**
 * Call `refresh` every `ms` while the tab is visible, until the returned stop
 * function is called; `refresh` is never run twice at once.
 */
export function every(ms, refresh) {
  let timer = null;
  let running = false;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (document.visibilityState === "visible" && !running) {
      running = true;
      try {
        await refresh();
      } catch (error) {
        // One failed refresh (a page error, the API away) must not end the polling.
        console.error(error);
      } finally {
        running = false;
      }
    }
    if (!stopped) timer = window.setTimeout(tick, ms);
  };
  timer = window.setTimeout(tick, ms);
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}
