// Tasks: every task of the tenant, searchable, filtered and sorted, with its next
// run (the viewer's time and UTC) and the result of its latest execution.
//
// The latest result is not part of a task (recording it there would cost a write
// per fire): it is one `GET /tasks/{id}/executions?limit=1` per task shown, a
// single-partition read, asked again only when it may have changed.

import { allPages, api, describeError } from "../api.js";
import { announce, excerpt, field, fill, h, link, select, statusBadge } from "../dom.js";
import { BASE, every, setQuery, setTitle, taskPath } from "../router.js";
import { relative, timeCell } from "../time.js";
import { handlerLabel } from "../handlers.js";

const REFRESH_MS = 5000;
// A task's last result is asked for again when its version or last occurrence
// moved, while its latest run has not ended, and otherwise once a minute (a
// trigger or a redrive moves neither): each ask is an API call, signed and billed
// behind `dynacron console`, and a tenant may have a thousand tasks.
const LAST_RESULT_TTL_MS = 60000;
const LAST_RESULT_CONCURRENCY = 4;
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "SKIPPED"]);
// Sorting by last result puts what needs attention first.
const RESULT_ORDER = ["FAILED", "RUNNING", "QUEUED", "SUCCEEDED", "SKIPPED"];
const SORTS = [
  ["next", "Next run"],
  ["name", "Name"],
  ["result", "Last result"],
];

// Latest executions by task id, kept across renders of the page.
const lastResults = new Map();

export function render(main, { query }) {
  setTitle("Tasks");
  const state = {
    name: query.get("q") || "",
    status: query.get("status") || "",
    kind: query.get("kind") || "",
    tag: query.get("tag") || "",
    sort: query.get("sort") || "next",
    tasks: [],
    complete: true,
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
  const sortSelect = select("sort-by", SORTS, state.sort);
  const summary = h("p", { class: "summary", id: "tasks-summary" });
  const tableHolder = h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Tasks table" });
  const problem = h("div", { class: "alert", role: "alert", hidden: true });

  const filters = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter tasks", on: { submit: (e) => e.preventDefault() } },
    field("Search by name", nameInput),
    field("Status", statusSelect),
    field("Schedule kind", kindSelect),
    field("Tag", tagInput, "key:value or key; applied by the API"),
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
  );

  const remember = () =>
    setQuery({ q: state.name, status: state.status, kind: state.kind, tag: state.tag, sort: state.sort === "next" ? "" : state.sort });

  nameInput.addEventListener("input", () => {
    state.name = nameInput.value;
    remember();
    draw();
  });
  statusSelect.addEventListener("change", () => {
    state.status = statusSelect.value;
    remember();
    draw();
  });
  kindSelect.addEventListener("change", () => {
    state.kind = kindSelect.value;
    remember();
    draw();
  });
  sortSelect.addEventListener("change", () => {
    state.sort = sortSelect.value;
    remember();
    draw();
  });
  const applyTag = () => {
    const tag = tagInput.value.trim();
    if (tag === state.tag) return;
    state.tag = tag;
    remember();
    load().then(() => announce(tag ? `Showing tasks tagged ${tag}.` : "Showing tasks with any tags."));
  };
  tagInput.addEventListener("change", applyTag);
  tagInput.addEventListener("keydown", (event) => {
    if (event.key === "Enter") applyTag();
  });

  function sortBy(key) {
    state.sort = key;
    sortSelect.value = key;
    remember();
    draw();
    announce(`Sorted by ${SORTS.find(([k]) => k === key)[1].toLowerCase()}.`);
  }

  function filterByTag(key, value) {
    tagInput.value = `${key}:${value}`;
    applyTag();
  }

  // A refresh redraws the table only when something changed (or the relative
  // times have aged): a screen reader's place in it is not lost every few seconds.
  let drawn = { fingerprint: null, at: 0 };
  async function load() {
    try {
      const answer = await allPages("/tasks", { tag: state.tag || null }, 10);
      state.tasks = answer.items;
      state.complete = answer.complete;
      state.error = null;
    } catch (error) {
      state.error = describeError(error);
    }
    state.loaded = true;
    const fingerprint = JSON.stringify([state.tasks, state.error, state.tag]);
    if (fingerprint !== drawn.fingerprint || Date.now() - drawn.at > 30000) {
      drawn = { fingerprint, at: Date.now() };
      draw();
    }
    await loadLastResults(state.tasks, draw);
  }

  function visible() {
    const needle = state.name.trim().toLowerCase();
    const shown = state.tasks.filter(
      (task) =>
        (!needle || task.name.toLowerCase().includes(needle)) &&
        (!state.status || task.status === state.status) &&
        (!state.kind || task.schedule.kind === state.kind),
    );
    return shown.sort(comparator(state.sort));
  }

  function draw() {
    problem.hidden = !state.error;
    problem.textContent = state.error || "";
    if (!state.loaded) return;
    const shown = visible();
    const total = state.tasks.length;
    const paused = state.tasks.filter((t) => t.status === "PAUSED").length;
    const failing = state.tasks.filter((t) => lastResults.get(t.task_id)?.execution?.status === "FAILED").length;
    fill(
      summary,
      `Showing ${shown.length} of ${total} task${total === 1 ? "" : "s"}`,
      state.tag ? ` tagged ${state.tag}` : "",
      paused ? ` · ${paused} paused` : "",
      failing ? ` · ${failing} with a failed last run` : "",
      state.complete ? "" : " · only the first 1,000 tasks are loaded",
    );
    const focusKey = document.activeElement?.dataset?.focusKey;
    if (total === 0 && !state.error) {
      fill(
        tableHolder,
        h(
          "div",
          { class: "empty" },
          h("p", {}, state.tag ? `No task has the tag ${state.tag}.` : "No tasks yet."),
          h("p", {}, link(`${BASE}/tasks/new`, "Create a task"), " here, or register one with the API (POST /tasks) or the CLI."),
        ),
      );
      return;
    }
    fill(tableHolder, tasksTable(shown, state.sort, filterByTag, sortBy));
    if (focusKey) tableHolder.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
  }

  load();
  const stop = every(REFRESH_MS, load);
  return stop;
}

function comparator(sort) {
  const byName = (a, b) => a.name.localeCompare(b.name);
  if (sort === "name") return byName;
  if (sort === "result") {
    const rank = (task) => {
      const status = lastResults.get(task.task_id)?.execution?.status;
      const index = RESULT_ORDER.indexOf(status);
      return index === -1 ? RESULT_ORDER.length : index;
    };
    return (a, b) => rank(a) - rank(b) || byName(a, b);
  }
  // Next run: soonest first; a task that will not run (paused, done) last.
  const when = (task) =>
    task.status === "ACTIVE" && task.next_run_at ? new Date(task.next_run_at).getTime() : Infinity;
  return (a, b) => when(a) - when(b) || byName(a, b);
}

function tasksTable(tasks, sort, filterByTag, sortBy) {
  // A sortable column's header is a button; the column sorted by says so (aria-sort).
  const header = (label, key) => {
    if (!key) return h("th", { scope: "col" }, label);
    const sorted = key === sort;
    return h(
      "th",
      { scope: "col", "aria-sort": sorted ? (key === "result" ? "other" : "ascending") : null },
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
        header("Last result", "result"),
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
