// Tasks: the tenant's tasks, searched by name, filtered and sorted by the API a page
// at a time (GET /tasks: no ceiling on how many a tenant has), with their next run
// (the viewer's time and UTC) and the result of their latest execution.
//
// The latest result is not part of a task (recording it there would cost a write
// per fire): it is one `GET /tasks/{id}/executions?limit=1` per task shown, a
// single-partition read, asked again only when it may have changed.

import { ApiError, api, describeError } from "../api.js";
import { announce, excerpt, field, fill, h, link, select, statusBadge } from "../dom.js";
import { BASE, every, setQuery, setTitle, taskPath } from "../router.js";
import { relative, timeCell } from "../time.js";
import { handlerLabel } from "../handlers.js";

const REFRESH_MS = 5000;
// Tasks per page asked of the API; "Show more" asks for the next.
const PAGE_SIZE = 100;
// A refresh reads again at most this many pages (what the person has scrolled through).
const REFRESHED_PAGES = 10;
// Typing in the search box asks the API once the typing pauses.
const SEARCH_DELAY_MS = 250;
// A task's last result is asked for again when its version or last occurrence
// moved, while its latest run has not ended, and otherwise once a minute (a
// trigger or a redrive moves neither): each ask is an API call, signed and billed
// behind `dynacron console`.
const LAST_RESULT_TTL_MS = 60000;
const LAST_RESULT_CONCURRENCY = 4;
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "SKIPPED"]);
// The orders the API offers: ours, its `sort`, and how the control says it.
const SORTS = [
  ["next", "Next run"],
  ["name", "Name"],
  ["created", "Created"],
];
const API_SORTS = { next: "next_run_at", name: "name", created: "created_at" };

// Latest executions by task id, kept across renders of the page.
const lastResults = new Map();
// Whether the API sorts by next run (DynamoDB does not: GET /tasks says so with a 422).
let nextRunOffered = true;

export function render(main, { query }) {
  setTitle("Tasks");
  const offered = () => SORTS.filter(([key]) => key !== "next" || nextRunOffered);
  const defaultSort = () => (nextRunOffered ? "next" : "name");
  const asked = query.get("sort") || "";
  const state = {
    name: query.get("q") || "",
    status: query.get("status") || "",
    kind: query.get("kind") || "",
    tag: query.get("tag") || "",
    sort: offered().some(([key]) => key === asked) ? asked : defaultSort(),
    tasks: [],
    nextToken: null,
    pages: 1,
    loaded: false,
    error: null,
  };

  const nameInput = h("input", { id: "filter-name", type: "search", value: state.name, autocomplete: "off" });
  const statusSelect = select(
    "filter-status",
    [["", "Any status"], ["ACTIVE", "Active"], ["PAUSED", "Paused"], ["COMPLETED", "Completed"], ["ERROR", "Error"]],
    state.status,
  );
  const kindSelect = select(
    "filter-kind",
    [["", "Any schedule"], ["cron", "Cron"], ["rate", "Rate"], ["at", "One time (at)"], ["fixed_delay", "Fixed delay"], ["after", "After another task"]],
    state.kind,
  );
  const tagInput = h("input", {
    id: "filter-tag",
    type: "text",
    value: state.tag,
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "team:billing",
  });
  const sortSelect = select("sort-by", offered(), state.sort);
  const summary = h("p", { class: "summary", id: "tasks-summary" });
  const tableHolder = h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Tasks table" });
  const more = h("button", { type: "button", class: "button", id: "more-tasks", hidden: true }, "Show more tasks");
  const problem = h("div", { class: "alert", role: "alert", hidden: true });

  const filters = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter tasks", on: { submit: (e) => e.preventDefault() } },
    field("Search by name", nameInput, "the start of a name, any case; lists by name"),
    field("Status", statusSelect),
    field("Schedule kind", kindSelect),
    field("Tag", tagInput, "key:value or key"),
    field("Sort by", sortSelect),
  );

  fill(
    main,
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Tasks"),
      h("a", { href: `${BASE}/tasks/new`, "data-route": "", class: "button primary" }, "New task"),
    ),
    filters,
    problem,
    summary,
    tableHolder,
    more,
  );

  // A name search lists by name (the API's name index is in that order).
  const sorted = () => (state.name.trim() ? "name" : state.sort);
  const showSort = () => {
    sortSelect.value = sorted();
    sortSelect.disabled = Boolean(state.name.trim());
  };
  showSort();

  const remember = () =>
    setQuery({
      q: state.name,
      status: state.status,
      kind: state.kind,
      tag: state.tag,
      sort: state.sort === defaultSort() ? "" : state.sort,
    });

  // Filters changed: from the first page again.
  const refilter = (message) => {
    state.pages = 1;
    remember();
    showSort();
    load().then(() => {
      if (message) announce(message());
    });
  };
  const shownCount = () => `${state.tasks.length}${state.nextToken ? "+" : ""} task${state.tasks.length === 1 ? "" : "s"}`;

  let typing = null;
  nameInput.addEventListener("input", () => {
    window.clearTimeout(typing);
    typing = window.setTimeout(() => {
      if (nameInput.value === state.name) return;
      state.name = nameInput.value;
      refilter(() => `${shownCount()} found.`);
    }, SEARCH_DELAY_MS);
  });
  statusSelect.addEventListener("change", () => {
    state.status = statusSelect.value;
    refilter();
  });
  kindSelect.addEventListener("change", () => {
    state.kind = kindSelect.value;
    refilter();
  });
  sortSelect.addEventListener("change", () => sortBy(sortSelect.value));
  const applyTag = () => {
    const tag = tagInput.value.trim();
    if (tag === state.tag) return;
    state.tag = tag;
    refilter(() => (tag ? `Showing tasks tagged ${tag}.` : "Showing tasks with any tags."));
  };
  tagInput.addEventListener("change", applyTag);
  tagInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") applyTag();
  });
  more.addEventListener("click", () => {
    state.pages += 1;
    load({ next: true }).then(() => announce(`${shownCount()} shown.`));
  });

  function sortBy(key) {
    // A name search lists by name only.
    if (state.name.trim() && key !== "name") return;
    state.sort = key;
    refilter(() => `Sorted by ${SORTS.find(([k]) => k === key)[1].toLowerCase()}.`);
  }

  function filterByTag(key, value) {
    tagInput.value = `${key}:${value}`;
    applyTag();
  }

  function listing() {
    const name = state.name.trim();
    return {
      name_prefix: name || null,
      sort: name ? null : API_SORTS[state.sort],
      status: state.status || null,
      kind: state.kind || null,
      tag: state.tag || null,
      limit: PAGE_SIZE,
    };
  }

  // The pages asked for, from the first (a refresh) or the next one only ("Show
  // more"). A load overtaken by a newer one (the filters changed) is dropped.
  let generation = 0;
  async function pages({ next = false } = {}) {
    const query = listing();
    let token = next ? state.nextToken : null;
    const items = next ? [...state.tasks] : [];
    const count = next ? 1 : Math.min(state.pages, REFRESHED_PAGES);
    for (let page = 0; page < count; page += 1) {
      const answer = await api("GET", "/tasks", { query: { ...query, next_token: token } });
      items.push(...answer.items);
      token = answer.next_token;
      if (!token) break;
    }
    return { items, token };
  }

  let drawn = { fingerprint: null, at: 0 };
  async function load(options = {}) {
    generation += 1;
    const mine = generation;
    try {
      const answer = await pages(options);
      if (mine !== generation) return;
      state.tasks = answer.items;
      state.nextToken = answer.token;
      state.error = null;
    } catch (error) {
      if (mine !== generation) return;
      if (notSortingByNextRun(error)) {
        // This deployment's store has no next-run order: sort by name instead.
        nextRunOffered = false;
        fill(sortSelect, ...offered().map(([value, label]) => h("option", { value }, label)));
        state.sort = "name";
        remember();
        showSort();
        announce("This deployment does not sort tasks by next run: sorted by name.");
        return load(options);
      }
      state.error = describeError(error);
    }
    state.loaded = true;
    // A refresh redraws the table only when something changed (or the relative
    // times have aged): a screen reader's place in it is not lost every few seconds.
    const fingerprint = JSON.stringify([state.tasks, state.nextToken, state.error, listing()]);
    if (fingerprint !== drawn.fingerprint || Date.now() - drawn.at > 30000) {
      drawn = { fingerprint, at: Date.now() };
      draw();
    }
    await loadLastResults(state.tasks, draw);
  }

  function notSortingByNextRun(error) {
    return (
      error instanceof ApiError &&
      error.status === 422 &&
      listing().sort === "next_run_at" &&
      error.errors.some((e) => e.field === "sort")
    );
  }

  function draw() {
    problem.hidden = !state.error;
    problem.textContent = state.error || "";
    more.hidden = !state.nextToken;
    if (!state.loaded) return;
    const shown = state.tasks;
    const total = shown.length;
    const paused = shown.filter((t) => t.status === "PAUSED").length;
    const failing = shown.filter((t) => lastResults.get(t.task_id)?.execution?.status === "FAILED").length;
    const name = state.name.trim();
    const filtered = Boolean(name || state.status || state.kind || state.tag);
    fill(
      summary,
      `Showing ${total} task${total === 1 ? "" : "s"}`,
      name ? ` named ${name}…` : "",
      state.tag ? ` tagged ${state.tag}` : "",
      paused ? ` · ${paused} paused` : "",
      failing ? ` · ${failing} with a failed last run` : "",
      state.nextToken ? " · more on the next page" : "",
    );
    const focusKey = document.activeElement?.dataset?.focusKey;
    if (total === 0 && !state.error && !filtered) {
      fill(
        tableHolder,
        h(
          "div",
          { class: "empty" },
          h("p", {}, "No tasks yet."),
          h("p", {}, link(`${BASE}/tasks/new`, "Create a task"), " here, or register one with the API (POST /tasks) or the CLI."),
        ),
      );
      return;
    }
    fill(tableHolder, tasksTable(shown, sorted(), filterByTag, sortBy));
    if (focusKey) tableHolder.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
  }

  load();
  // Past the pages a refresh reads again, the list stays as loaded (a refresh would
  // drop what the person has scrolled to); the last results still refresh.
  const refresh = () => (state.pages > REFRESHED_PAGES ? loadLastResults(state.tasks, draw) : load());
  const stop = every(REFRESH_MS, refresh);
  return stop;
}

function tasksTable(tasks, sort, filterByTag, sortBy) {
  // A sortable column's header is a button; the column sorted by says so (aria-sort).
  const header = (label, key) => {
    if (!key || (key === "next" && !nextRunOffered)) return h("th", { scope: "col" }, label);
    const sorted = key === sort;
    return h(
      "th",
      { scope: "col", "aria-sort": sorted ? "ascending" : null },
      h("button", { type: "button", class: "sort", dataset: { focusKey: `sort-${key}` }, on: { click: () => sortBy(key) } }, label),
    );
  };
  return h(
    "table",
    { class: "data", id: "tasks-table" },
    h("caption", { class: "visually-hidden" }, "Tasks, with their schedule, next run and last result"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        header("Name", "name"),
        header("Schedule"),
        header("Status"),
        header("Next run", "next"),
        header("Last result"),
        header("Tags"),
      ),
    ),
    h(
      "tbody",
      {},
      tasks.length
        ? tasks.map((task) => taskRow(task, filterByTag))
        : h("tr", {}, h("td", { colspan: "6", class: "muted" }, "No task matches these filters.")),
    ),
  );
}

function taskRow(task, filterByTag) {
  const last = lastResults.get(task.task_id);
  return h(
    "tr",
    { dataset: { taskId: task.task_id } },
    h(
      "td",
      { class: "name-cell" },
      h("a", { href: taskPath(task.task_id), "data-route": "", dataset: { focusKey: `task-${task.task_id}` } }, task.name),
      task.name !== task.task_id ? h("span", { class: "id" }, task.task_id) : null,
      task.target ? h("span", { class: "note target-name" }, handlerLabel(task)) : null,
    ),
    h("td", {}, scheduleSummary(task)),
    h(
      "td",
      {},
      statusBadge(task.status),
      task.pause_note ? h("span", { class: "note" }, excerpt(task.pause_note, 60)) : null,
      task.status_reason ? h("span", { class: "note" }, excerpt(task.status_reason, 60)) : null,
    ),
    h(
      "td",
      {},
      task.status === "ACTIVE"
        ? timeCell(task.next_run_at, { relativeToNow: true })
        : h("span", { class: "muted" }, task.status === "PAUSED" ? "paused" : "—"),
    ),
    h("td", { class: "result-cell" }, lastResult(last)),
    h("td", {}, tagChips(task.tags, filterByTag)),
  );
}

export function scheduleSummary(task) {
  const schedule = task.schedule;
  const kinds = { cron: "cron", rate: "every", at: "once at", fixed_delay: "delay", after: "after", unreadable: "unreadable" };
  return h(
    "span",
    { class: "schedule" },
    h("span", { class: "kind" }, kinds[schedule.kind] || schedule.kind),
    " ",
    h("code", {}, schedule.expression || "—"),
    task.timezone && task.timezone !== "UTC" ? h("span", { class: "zone" }, task.timezone) : null,
  );
}

function lastResult(last) {
  if (!last) return h("span", { class: "muted pending" }, "loading");
  const execution = last.execution;
  if (!execution) return h("span", { class: "muted" }, "never ran");
  const when = execution.completed_at || execution.started_at || execution.scheduled_at;
  return h(
    "span",
    { class: "last-result" },
    statusBadge(execution.status),
    " ",
    h("time", { datetime: when, class: "relative" }, relative(when)),
    execution.error ? h("span", { class: "error-text" }, excerpt(execution.error, 80)) : null,
  );
}

export function tagChips(tags, onPick) {
  const entries = Object.entries(tags || {});
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return h(
    "ul",
    { class: "tags", "aria-label": "Tags" },
    entries.map(([key, value]) =>
      h(
        "li",
        {},
        onPick
          ? h(
              "button",
              {
                type: "button",
                class: "tag",
                "aria-label": `Filter by tag ${key}:${value}`,
                dataset: { focusKey: `tag-${key}:${value}` },
                on: { click: () => onPick(key, value) },
              },
              `${key}: ${value}`,
            )
          : h("span", { class: "tag" }, `${key}: ${value}`),
      ),
    ),
  );
}

async function loadLastResults(tasks, redraw) {
  const now = Date.now();
  const due = tasks.filter((task) => {
    const known = lastResults.get(task.task_id);
    if (!known) return true;
    if (known.stamp !== stampOf(task)) return true;
    if (known.execution && !TERMINAL.has(known.execution.status)) return true;
    return now - known.fetchedAt > LAST_RESULT_TTL_MS;
  });
  let changed = false;
  const worker = async () => {
    while (due.length) {
      const task = due.shift();
      try {
        const page = await api("GET", `/tasks/${encodeURIComponent(task.task_id)}/executions`, { query: { limit: 1 } });
        const execution = page.items[0] || null;
        const before = lastResults.get(task.task_id)?.execution;
        lastResults.set(task.task_id, { execution, stamp: stampOf(task), fetchedAt: Date.now() });
        if (JSON.stringify(before) !== JSON.stringify(execution)) changed = true;
      } catch {
        // The task went away meanwhile, or the API is unreachable: the next refresh tries again.
      }
    }
  };
  await Promise.all(Array.from({ length: LAST_RESULT_CONCURRENCY }, worker));
  if (changed) redraw();
}

function stampOf(task) {
  return `${task.version}|${task.last_scheduled_at || ""}`;
}
