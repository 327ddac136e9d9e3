// The console's router: pages under /console, rendered in the browser from the
// API's answers. Links marked data-route change the page without a reload; the
// address bar always names the page (and its filters), so Back and a reload work.

import { allowKeyPrompt, forgetApiKey, hasApiKey, keyDeclined } from "./api.js";
import { announce, fill, h } from "./dom.js";
import * as create from "./pages/create.js";
import * as executions from "./pages/executions.js";
import * as forecast from "./pages/forecast.js";
import * as task from "./pages/task.js";
import * as tasks from "./pages/tasks.js";
import { BASE } from "./router.js";
import { viewerZone } from "./time.js";

const ROUTES = [
  { pattern: /^\/?$/, page: tasks, nav: "tasks" },
  { pattern: /^\/tasks\/?$/, page: tasks, nav: "tasks" },
  { pattern: /^\/tasks\/new\/?$/, page: create, nav: "new" },
  { pattern: /^\/tasks\/([^/]+)\/edit\/?$/, page: create, nav: "tasks", edit: true },
  { pattern: /^\/tasks\/([^/]+)\/?$/, page: task, nav: "tasks" },
  { pattern: /^\/executions\/?$/, page: executions, nav: "executions" },
  { pattern: /^\/forecast\/?$/, page: forecast, nav: "forecast" },
];

let cleanup = null;
let rendered = null;
let firstRender = true;

function render() {
  const key = window.location.pathname + window.location.search;
  if (key === rendered) return; // only the fragment changed (the skip link)
  rendered = key;
  if (cleanup) cleanup();
  cleanup = null;
  const path = window.location.pathname.startsWith(BASE)
    ? window.location.pathname.slice(BASE.length)
    : window.location.pathname;
  const main = document.getElementById("main");
  let route = null;
  let match = null;
  for (const candidate of ROUTES) {
    match = candidate.pattern.exec(path);
    if (match) {
      route = candidate;
      break;
    }
  }
  for (const item of document.querySelectorAll("[data-nav]")) {
    if (route && item.dataset.nav === route.nav) item.setAttribute("aria-current", "page");
    else item.removeAttribute("aria-current");
  }
  let params = null;
  try {
    params = route ? match.slice(1).map(decodeURIComponent) : null;
  } catch {
    params = null; // an escape that decodes to nothing (/console/tasks/%E0)
  }
  if (!params) {
    fill(main, h("h1", { tabindex: "-1" }, "Page not found"), h("p", {}, "No console page has this address."));
    focusHeading(main);
    return;
  }
  const query = new URLSearchParams(window.location.search);
  const page = route.page;
  cleanup = page.render(main, { params, query, edit: Boolean(route.edit) }) || null;
  if (!firstRender) focusHeading(main);
  firstRender = false;
}

/** After a page change, focus its heading: a screen reader announces the new page. */
function focusHeading(main) {
  const heading = main.querySelector("h1");
  if (heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus({ preventScroll: false });
  }
}

function followLinks(event) {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const anchor = event.target instanceof Element ? event.target.closest("a[data-route]") : null;
  if (!anchor || anchor.target) return;
  const url = new URL(anchor.href, window.location.href);
  if (url.origin !== window.location.origin || !url.pathname.startsWith(BASE)) return;
  event.preventDefault();
  window.history.pushState(null, "", url.pathname + url.search);
  render();
}

function showKeyControls() {
  const end = document.getElementById("topbar-end");
  if (!end) return;
  if (keyDeclined()) {
    const ask = () => {
      allowKeyPrompt();
      showKeyControls();
      rendered = null;
      render();
    };
    fill(end, h("button", { type: "button", class: "button subtle", on: { click: ask } }, "Enter API key"));
    return;
  }
  if (!hasApiKey()) {
    end.replaceChildren();
    return;
  }
  const button = h(
    "button",
    {
      type: "button",
      class: "button subtle",
      on: {
        click: () => {
          forgetApiKey();
          announce("The API key was forgotten; the next call will ask for one.");
          showKeyControls();
        },
      },
    },
    "Forget API key",
  );
  fill(end, button);
}

document.addEventListener("click", followLinks);
window.addEventListener("popstate", render);
window.addEventListener("dynacron:navigate", render);
window.addEventListener("dynacron:reload", () => {
  rendered = null;
  render();
});
window.addEventListener("dynacron:query", () => {
  rendered = window.location.pathname + window.location.search;
});
document.addEventListener("dynacron:key", showKeyControls);
document.addEventListener("DOMContentLoaded", () => {
  const zone = document.getElementById("viewer-zone");
  if (zone) zone.textContent = viewerZone;
  render();
  showKeyControls();
});
