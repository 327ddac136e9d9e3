// Executions across tasks (GET /executions): what failed, what waits for a retry,
// what runs, for the whole tenant, newest first; dead letters redriven from here.

import { api, describeError } from "../api.js";
import { announce, excerpt, field, fill, h, select, statusBadge } from "../dom.js";
import { every, setQuery, setTitle, taskPath } from "../router.js";
import { fromLocalInput, relative, timeCell, toLocalInput } from "../time.js";

const REFRESH_MS = 5000;
// Task names read at once for the executions shown (each one GET /tasks/{id}).
const NAME_READS_AT_ONCE = 4;
const RANGES = [
  ["1h", "Last hour", 3600],
  ["6h", "Last 6 hours", 6 * 3600],
  ["24h", "Last 24 hours", 24 * 3600],
  ["7d", "Last 7 days", 7 * 86400],
  ["all", "Any time", null],
  ["custom", "Between…", null],
];

export function render(main, { query }) {
  setTitle("Executions");
  const state = {
    status: query.get("status") || "",
    range: query.get("range") || "24h",
    since: query.get("since") || "",
    until: query.get("until") || "",
    items: [],
    nextToken: null,
    names: new Map(),
    missing: new Set(),
    loaded: false,
  };
  const statusSelect = select(
    "filter-execution-status",
    [["", "Failed, queued or running"], ["FAILED", "Failed (dead letters)"], ["QUEUED", "Queued for a retry"], ["RUNNING", "Running"]],
    state.status,
  );
  const rangeSelect = select("filter-range", RANGES.map(([v, label]) => [v, label]), state.range);
  const sinceInput = h("input", { id: "filter-since", type: "datetime-local", value: state.since });
  const untilInput = h("input", { id: "filter-until", type: "datetime-local", value: state.until });
  const custom = h("div", { class: "custom-range", hidden: state.range !== "custom" }, field("From", sinceInput), field("To", untilInput));
  const summary = h("p", { class: "summary" });
  const problem = h("div", { class: "alert", role: "alert", hidden: true });
  const holder = h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Executions table" });
  const more = h("div", {});

  fill(
    main,
    h("div", { class: "page-head" }, h("h1", {}, "Executions across tasks")),
    h(
      "p",
      { class: "lede" },
      "Failed executions (dead letters), executions queued for a retry and running ones, newest first. ",
      "Succeeded runs are on each task's page.",
    ),
    h(
      "form",
      { class: "filters", role: "search", "aria-label": "Filter executions", on: { submit: (e) => e.preventDefault() } },
      field("Status", statusSelect),
      field("Time range", rangeSelect, "When each entered the state it is listed in"),
      custom,
    ),
    problem,
    summary,
    holder,
    more,
  );

  const remember = () =>
    setQuery({
      status: state.status,
      range: state.range === "24h" ? "" : state.range,
      since: state.range === "custom" ? state.since : "",
      until: state.range === "custom" ? state.until : "",
    });
  const changed = () => {
    state.status = statusSelect.value;
    state.range = rangeSelect.value;
    state.since = sinceInput.value;
    state.until = untilInput.value;
    custom.hidden = state.range !== "custom";
    if (state.range === "custom" && !state.since) {
      sinceInput.value = state.since = toLocalInput(new Date(Date.now() - 86400_000));
    }
    remember();
    load().then(() => announce(`${state.items.length} execution${state.items.length === 1 ? "" : "s"} listed.`));
  };
  for (const control of [statusSelect, rangeSelect, sinceInput, untilInput]) control.addEventListener("change", changed);

  function filters() {
    const range = RANGES.find(([v]) => v === state.range);
    const since = state.range === "custom" ? fromLocalInput(state.since) : range && range[2] ? new Date(Date.now() - range[2] * 1000).toISOString() : null;
    const until = state.range === "custom" ? fromLocalInput(state.until) : null;
    return { status: state.status || null, since, until };
  }

  async function loadNames(ids) {
    // Executions name their task by id: each task not named yet is read once, by
    // id (however many tasks the tenant has).
    const queue = [...new Set(ids)];
    const worker = async () => {
      while (queue.length) {
        const taskId = queue.shift();
        try {
          const task = await api("GET", `/tasks/${encodeURIComponent(taskId)}`);
          state.names.set(taskId, task.name);
        } catch {
          // Deleted since (404), or the API away: the id alone still identifies it.
        }
      }
    };
    await Promise.all(Array.from({ length: NAME_READS_AT_ONCE }, worker));
  }

  async function load(older = false) {
    try {
      const page = await api("GET", "/executions", { query: { ...filters(), limit: 50, next_token: older ? state.nextToken : null } });
      state.items = older ? [...state.items, ...page.items] : page.items;
      state.paged = older;
      state.nextToken = page.next_token;
      problem.hidden = true;
      // A task deleted since is looked up once, not at every refresh.
      const unknown = state.items.filter((e) => !state.names.has(e.task_id) && !state.missing.has(e.task_id));
      if (unknown.length) {
        await loadNames(unknown.map((e) => e.task_id));
        for (const e of unknown) if (!state.names.has(e.task_id)) state.missing.add(e.task_id);
      }
    } catch (error) {
      problem.hidden = false;
      problem.textContent = describeError(error);
    }
    state.loaded = true;
    // Redrawn only on a change: a keyboard user's place (a Redrive button) stays.
    const fingerprint = JSON.stringify([state.items, [...state.names], state.nextToken]);
    if (fingerprint !== state.drawn) {
      const focused = document.activeElement?.getAttribute("aria-label");
      state.drawn = fingerprint;
      draw();
      if (focused) holder.querySelector(`[aria-label="${CSS.escape(focused)}"]`)?.focus();
    }
  }

  async function redrive(execution, button) {
    button.disabled = true;
    try {
      const queued = await api("POST", `/dead-letters/${encodeURIComponent(execution.execution_id)}/redrive`, { body: {} });
      announce(`Redriven: ${queued.execution_id} is ${queued.status} again.`);
      await load();
    } catch (error) {
      button.disabled = false;
      problem.hidden = false;
      problem.textContent = describeError(error);
      announce(`Redrive failed: ${describeError(error)}`, "error");
    }
  }

  function draw() {
    const counts = {};
    for (const e of state.items) counts[e.status] = (counts[e.status] || 0) + 1;
    fill(
      summary,
      `${state.items.length} execution${state.items.length === 1 ? "" : "s"}`,
      Object.entries(counts).map(([status, n]) => ` · ${n} ${status.toLowerCase()}`),
      state.nextToken ? " (more below)" : "",
    );
    if (!state.items.length) {
      fill(holder, h("div", { class: "empty" }, h("p", {}, "Nothing failed, waits for a retry or runs in this range.")));
    } else {
      fill(
        holder,
        h(
          "table",
          { class: "data", id: "executions-table" },
          h("caption", { class: "visually-hidden" }, "Executions needing attention, newest first"),
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Task", "Status", "Attempt", "Scheduled", "Listed", "Error", "Handler response", "Action"].map((label) =>
                h("th", { scope: "col" }, label),
              ),
            ),
          ),
          h("tbody", {}, state.items.map(row)),
        ),
      );
    }
    fill(
      more,
      state.nextToken ? h("button", { type: "button", class: "button", on: { click: () => load(true) } }, "Load older executions") : null,
    );
  }

  function row(execution) {
    const name = state.names.get(execution.task_id) || execution.task_id;
    const stuck =
      execution.status === "RUNNING" && execution.lease_until && new Date(execution.lease_until).getTime() < Date.now();
    let action = h("span", { class: "muted" }, "—");
    if (execution.status === "FAILED" && execution.dead_lettered_at) {
      const button = h("button", { type: "button", class: "button small", "aria-label": `Redrive ${name}, ${execution.execution_id}` }, "Redrive");
      button.addEventListener("click", () => redrive(execution, button));
      action = button;
    } else if (execution.status === "QUEUED" && execution.next_attempt_at) {
      action = h("span", { class: "note" }, `retry ${relative(execution.next_attempt_at)}`);
    }
    return h(
      "tr",
      { dataset: { executionId: execution.execution_id, status: execution.status } },
      h("td", { class: "name-cell" }, h("a", { href: taskPath(execution.task_id), "data-route": "" }, name), h("span", { class: "id" }, execution.execution_id)),
      h("td", {}, statusBadge(execution.status), stuck ? h("span", { class: "note warn" }, "lease expired: stuck?") : null),
      h("td", { class: "numeric" }, String(execution.attempt)),
      h("td", {}, timeCell(execution.scheduled_at)),
      h("td", {}, timeCell(execution.attention_at, { relativeToNow: true })),
      h("td", { class: "error-cell" }, execution.error ? excerpt(execution.error, 160) : h("span", { class: "muted" }, "—")),
      h(
        "td",
        { class: "response-cell" },
        execution.result_status_code !== null ? h("span", { class: "http-status" }, `HTTP ${execution.result_status_code}`) : null,
        execution.result_excerpt ? h("code", { class: "long-text" }, excerpt(execution.result_excerpt, 120)) : null,
        execution.result_status_code === null && !execution.result_excerpt ? h("span", { class: "muted" }, "—") : null,
      ),
      h("td", {}, action),
    );
  }

  load();
  // Older pages loaded by hand stay until the filters change.
  return every(REFRESH_MS, () => (state.paged ? null : load()));
}
