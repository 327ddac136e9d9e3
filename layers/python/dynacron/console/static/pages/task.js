// A task: its schedule in words, its next occurrences, its history, and what an
// operator does to it (pause with a note, resume, trigger, backfill, edit, delete).

import { api, ApiError, describeError } from "../api.js";
import { confirmAction, openDialog } from "../dialogs.js";
import { handlerLabel } from "../handlers.js";
import { announce, excerpt, field, fill, h, link, statusBadge } from "../dom.js";
import { BASE, every, navigate, setTitle, taskPath } from "../router.js";
import { duration, formatIn, fromLocalInput, timeCell, toLocalInput } from "../time.js";
import { changeHistory } from "./changes.js";
import { occurrencesTable } from "./occurrences.js";
import { scheduleSummary, tagChips } from "./tasks.js";

const REFRESH_MS = 3000;
const HISTORY_PAGE = 25;

export function render(main, { params }) {
  const taskId = params[0];
  const state = { task: null, executions: [], nextToken: null, occurrences: null, stamp: null };
  const heading = h("h1", {}, "Task");
  const badge = h("span", { class: "head-badge" });
  const idLine = h("p", { class: "id-line" }, h("span", { class: "visually-hidden" }, "Task id "), h("code", {}, taskId));
  const actions = h("div", { class: "actions", role: "group", "aria-label": "Task actions" });
  const problem = h("div", { class: "alert", role: "alert", hidden: true });
  const pausedNote = h("div", { class: "notice", hidden: true });
  const scheduleCard = h("section", { class: "card", "aria-labelledby": "schedule-heading" });
  const nextCard = h("section", { class: "card", "aria-labelledby": "next-heading" });
  const historyCard = h("section", { class: "card wide", "aria-labelledby": "history-heading" });
  const definitionCard = h("section", { class: "card", "aria-labelledby": "definition-heading" });
  const changesCard = h("section", { class: "card wide", "aria-labelledby": "changes-heading" });

  setTitle("Task");
  fill(
    main,
    h("p", { class: "breadcrumb" }, link(`${BASE}/tasks`, "Tasks"), " / "),
    h("div", { class: "page-head" }, h("div", { class: "title-group" }, heading, badge), actions),
    idLine,
    problem,
    pausedNote,
    h("div", { class: "grid" }, scheduleCard, nextCard),
    historyCard,
    definitionCard,
    changesCard,
  );

  function showProblem(error) {
    problem.hidden = !error;
    problem.textContent = error ? describeError(error) : "";
  }

  // Polling redraws a part only when its data changed: focus and a screen
  // reader's place stay where they are.
  const drawn = { task: null, history: null };

  async function loadTask() {
    try {
      state.task = await api("GET", `/tasks/${encodeURIComponent(taskId)}`);
      showProblem(null);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        stop();
        fill(heading, "Task not found");
        setTitle("Task not found");
        fill(actions);
        problem.hidden = false;
        fill(problem, `No task ${taskId} exists for this tenant. `, link(`${BASE}/tasks`, "Back to the tasks"));
        return false;
      }
      showProblem(error);
      return false;
    }
    const fingerprint = JSON.stringify(state.task);
    if (fingerprint !== drawn.task) {
      drawn.task = fingerprint;
      drawTask();
    }
    return true;
  }

  async function loadOccurrences() {
    try {
      state.occurrences = await api("GET", `/tasks/${encodeURIComponent(taskId)}/next`, { query: { count: 10 } });
    } catch (error) {
      state.occurrences = { error: describeError(error) };
    }
    drawSchedule();
  }

  async function loadHistory(more = false) {
    try {
      const page = await api("GET", `/tasks/${encodeURIComponent(taskId)}/executions`, {
        query: { limit: HISTORY_PAGE, next_token: more ? state.nextToken : null },
      });
      if (more) {
        state.executions.push(...page.items);
        state.nextToken = page.next_token;
      } else {
        const fresh = new Set(page.items.map((e) => e.execution_id));
        const older = state.executions.filter((e) => !fresh.has(e.execution_id));
        state.executions = [...page.items, ...older].sort((a, b) => (a.scheduled_at < b.scheduled_at ? 1 : -1));
        if (!older.length) state.nextToken = page.next_token;
      }
    } catch (error) {
      showProblem(error);
    }
    const fingerprint = JSON.stringify([state.executions, state.nextToken]);
    if (fingerprint !== drawn.history) {
      drawn.history = fingerprint;
      drawHistory();
    }
  }

  async function refresh() {
    const before = state.stamp;
    if (!(await loadTask())) return;
    state.stamp = `${state.task.version}|${state.task.next_run_at}`;
    await loadHistory();
    if (before !== state.stamp) await Promise.all([loadOccurrences(), changes.load()]);
  }

  // Actions: each says what happened in the live region; a refusal shows its problem.
  async function act(label, call, done) {
    try {
      const result = await call();
      showProblem(null);
      announce(done(result));
      await refresh();
      await changes.load(); // a trigger changes no version, yet is a change
    } catch (error) {
      showProblem(error);
      announce(`${label} failed: ${describeError(error)}`, "error");
    }
  }

  const pause = async () => {
    const note = h("textarea", { id: "pause-note", name: "note", maxlength: "500", rows: "3" });
    const values = await openDialog({
      title: `Pause ${state.task.name}?`,
      message: "A paused task runs nothing until it is resumed; what falls due meanwhile is caught up by its catch-up policy.",
      fields: [field("Note (optional): why it is paused", note)],
      confirmLabel: "Pause task",
    });
    if (values === null) return;
    const body = values.note.trim() ? { note: values.note.trim() } : {};
    await act("Pause", () => api("POST", `/tasks/${encodeURIComponent(taskId)}/pause`, { body }), () => "Task paused.");
  };
  const resume = () =>
    act("Resume", () => api("POST", `/tasks/${encodeURIComponent(taskId)}/resume`, { body: {} }), () => "Task resumed.");
  const trigger = () =>
    act(
      "Trigger",
      () => api("POST", `/tasks/${encodeURIComponent(taskId)}/trigger`, { body: {} }),
      (execution) => `Triggered: execution ${execution.execution_id} is ${execution.status}.`,
    );
  const backfill = async () => {
    const now = new Date();
    const from = h("input", { id: "backfill-from", name: "from", type: "datetime-local", value: toLocalInput(new Date(now - 3600_000)), required: true });
    const to = h("input", { id: "backfill-to", name: "to", type: "datetime-local", value: toLocalInput(now), required: true });
    const values = await openDialog({
      title: `Backfill ${state.task.name}?`,
      message: "Runs every occurrence of the schedule between the two times (your time zone, both included) that was never run or asked for, at most 100.",
      fields: [field("From", from), field("To", to)],
      confirmLabel: "Run these occurrences",
      validate: (v) => (fromLocalInput(v.from) && fromLocalInput(v.to) ? null : "Give both times."),
    });
    if (values === null) return;
    await act(
      "Backfill",
      () => api("POST", `/tasks/${encodeURIComponent(taskId)}/backfill`, { body: { from: fromLocalInput(values.from), to: fromLocalInput(values.to) } }),
      (result) => `Backfill: started ${result.started.length} of ${result.execution_ids.length} occurrences in the range.`,
    );
  };
  const redrive = (execution) =>
    act(
      "Redrive",
      () => api("POST", `/dead-letters/${encodeURIComponent(execution.execution_id)}/redrive`, { body: {} }),
      (queued) => `Redriven: ${queued.execution_id} is ${queued.status} again.`,
    );
  const remove = async () => {
    const confirmed = await confirmAction({
      title: `Delete ${state.task.name}?`,
      message: "The task stops running and is removed. This cannot be undone.",
      confirmLabel: "Delete task",
    });
    if (!confirmed) return;
    try {
      await api("DELETE", `/tasks/${encodeURIComponent(taskId)}`);
      announce(`Task ${state.task.name} deleted.`);
      navigate(`${BASE}/tasks`);
    } catch (error) {
      showProblem(error);
    }
  };

  function drawTask() {
    const task = state.task;
    setTitle(task.name);
    fill(heading, task.name);
    fill(badge, statusBadge(task.status));
    const paused = task.status === "PAUSED";
    const runnable = task.status === "ACTIVE" || task.status === "COMPLETED";
    const button = (label, handler, cls = "button") => h("button", { type: "button", class: cls, on: { click: handler } }, label);
    const focused = document.activeElement?.dataset?.action;
    fill(
      actions,
      paused || task.status === "ERROR"
        ? button("Resume", resume, "button primary")
        : task.status === "ACTIVE"
          ? button("Pause…", pause)
          : null,
      runnable ? button("Trigger now", trigger) : null,
      runnable && ["cron", "rate", "at"].includes(task.schedule.kind) ? button("Backfill…", backfill) : null,
      h("a", { href: `${taskPath(taskId)}/edit`, "data-route": "", class: "button" }, "Edit"),
      button("Delete…", remove, "button danger"),
    );
    for (const control of actions.children) control.dataset.action = control.textContent;
    if (focused) {
      // The control that had focus, else (Pause became Resume) the first action.
      const same = [...actions.children].find((c) => c.dataset.action === focused);
      (same || actions.firstElementChild)?.focus();
    }
    pausedNote.hidden = !(paused || task.status_reason);
    fill(
      pausedNote,
      paused ? h("strong", {}, "Paused") : h("strong", {}, "Set aside"),
      paused && task.pause_note ? `: ${task.pause_note}` : "",
      task.status_reason ? `: ${task.status_reason}` : "",
    );
    drawSchedule();
    drawDefinition();
  }

  function drawSchedule() {
    const task = state.task;
    if (!task) return;
    const preview = state.occurrences;
    fill(
      scheduleCard,
      h("h2", { id: "schedule-heading" }, "Schedule"),
      h("p", {}, scheduleSummary(task)),
      h("p", { class: "explanation" }, preview && !preview.error ? preview.explanation : "…"),
      h(
        "dl",
        { class: "facts" },
        fact("Next run", task.status === "ACTIVE" ? timeCell(task.next_run_at, { relativeToNow: true }) : "—"),
        fact("Last scheduled", timeCell(task.last_scheduled_at)),
        fact("Time zone", task.timezone),
        task.dst ? fact("Daylight saving", `skipped time: ${task.dst.nonexistent}; repeated time: ${task.dst.ambiguous}`) : null,
        task.start_at ? fact("Not before", timeCell(task.start_at)) : null,
        task.end_at ? fact("Not after", timeCell(task.end_at)) : null,
        (task.exclude_calendars || []).length
          ? fact("Not on", `${task.exclude_calendars.join(", ")} (an excluded day: ${task.on_excluded === "next" ? "next included day" : "skipped"})`)
          : null,
        (task.only_calendars || []).length ? fact("Only on", task.only_calendars.join(", ")) : null,
        (task.skips || []).length ? fact("Skips", `${task.skips.length} ahead (DELETE /tasks/{id}/skips to remove)`) : null,
      ),
    );
    fill(
      nextCard,
      h("h2", { id: "next-heading" }, "Next occurrences"),
      !preview
        ? h("p", { class: "muted" }, "Loading…")
        : preview.error
          ? h("p", { class: "error-text" }, preview.error)
          : occurrencesTable(preview, { caption: "The next 10 occurrences; daylight-saving changes and skipped occurrences marked" }),
    );
  }

  function drawHistory() {
    const rows = state.executions.map((execution) => executionRow(execution, redrive));
    const more = state.nextToken
      ? h("button", { type: "button", class: "button", on: { click: () => loadHistory(true) } }, "Load older executions")
      : null;
    fill(
      historyCard,
      h("h2", { id: "history-heading" }, "Executions"),
      rows.length
        ? h(
            "div",
            { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Executions (scrolls sideways)" },
            h(
              "table",
              { class: "data", id: "history-table" },
              h("caption", { class: "visually-hidden" }, "Executions of this task, newest first"),
              h(
                "thead",
                {},
                h(
                  "tr",
                  {},
                  ["Status", "Attempt", "Scheduled", "Started", "Ended", "Duration", "Error", "Handler response"].map((label) =>
                    h("th", { scope: "col" }, label),
                  ),
                ),
              ),
              h("tbody", {}, rows),
            ),
          )
        : h("p", { class: "muted" }, "No execution yet."),
      more,
    );
  }

  function drawDefinition() {
    const task = state.task;
    const retry = task.retry;
    fill(
      definitionCard,
      h("h2", { id: "definition-heading" }, "Definition"),
      h(
        "dl",
        { class: "facts two-columns" },
        fact("Handler", task.handler_url ? h("code", {}, task.handler_url) : handlerLabel(task)),
        task.target ? fact("Target ARN", h("code", {}, task.target.arn)) : null,
        fact("Retry", `${retry.max_attempts} attempt${retry.max_attempts === 1 ? "" : "s"}, backoff ${retry.base_delay_seconds}–${retry.max_delay_seconds} s`),
        fact("Catch-up", task.catchup + (task.catchup_window_seconds ? ` (window ${task.catchup_window_seconds} s)` : "")),
        fact("Overlap", task.overlap),
        fact("Jitter", `${task.jitter_seconds} s`),
        task.max_concurrency ? fact("Max concurrency", String(task.max_concurrency)) : null,
        fact("Tags", tagChips(task.tags)),
        task.notify ? fact("Notify", notifyList(task.notify)) : null,
        fact("Version", String(task.version)),
        fact("Created", formatIn(task.created_at)),
        fact("Updated", formatIn(task.updated_at)),
      ),
      h("h3", {}, "Payload"),
      h("pre", { class: "payload", tabindex: "0", role: "region", "aria-label": "Payload (JSON)" }, JSON.stringify(task.payload, null, 2)),
    );
  }

  const changes = changeHistory(changesCard, taskId, { act: (...args) => act(...args), version: () => state.task.version });

  let stop = () => {};
  let left = false; // the page was left before its first loads ended
  (async () => {
    if (await loadTask()) {
      state.stamp = `${state.task.version}|${state.task.next_run_at}`;
      await Promise.all([loadOccurrences(), loadHistory(), changes.load()]);
      if (!left) stop = every(REFRESH_MS, refresh);
    }
  })();
  return () => {
    left = true;
    stop();
  };
}

function fact(label, value) {
  return [h("dt", {}, label), h("dd", {}, value)];
}

/** How an execution came about, from its id: scheduled, by hand, a backfill, a dependency. */
export function origin(execution) {
  if (execution.execution_id.endsWith("-trigger")) return "triggered";
  if (execution.execution_id.endsWith("-backfill")) return "backfill";
  if (execution.upstream_execution_id) return "after upstream";
  return null;
}

export function executionRow(execution, redrive) {
  const kind = origin(execution);
  // A dead letter (failed every attempt) can be run again from here.
  const again =
    execution.status === "FAILED" && execution.dead_lettered_at
      ? h(
          "button",
          {
            type: "button",
            class: "button small",
            "aria-label": `Redrive ${execution.execution_id}`,
            on: { click: () => redrive(execution) },
          },
          "Redrive",
        )
      : null;
  return h(
    "tr",
    { dataset: { executionId: execution.execution_id, status: execution.status } },
    h("td", {}, statusBadge(execution.status), kind ? h("span", { class: "note" }, kind) : null, again),
    h("td", { class: "numeric" }, String(execution.attempt)),
    h("td", {}, timeCell(execution.scheduled_at)),
    h("td", {}, timeCell(execution.started_at, { sameDayAs: execution.scheduled_at })),
    h("td", {}, timeCell(execution.completed_at, { sameDayAs: execution.started_at })),
    h("td", { class: "numeric" }, duration(execution.started_at, execution.completed_at)),
    h("td", { class: "error-cell" }, execution.error ? longText(execution.error) : h("span", { class: "muted" }, "—")),
    h("td", { class: "response-cell" }, response(execution)),
  );
}

function response(execution) {
  if (execution.result_status_code === null && !execution.result_excerpt) return h("span", { class: "muted" }, "—");
  return h(
    "span",
    {},
    execution.result_status_code !== null ? h("span", { class: "http-status" }, `HTTP ${execution.result_status_code}`) : null,
    execution.result_excerpt ? longText(execution.result_excerpt, "code") : null,
  );
}

/** Text shown whole when short, else cut with a disclosure for the rest. */
function longText(text, tag = "span") {
  if (text.length <= 100) return h(tag, { class: "long-text" }, text);
  return h("details", {}, h("summary", {}, excerpt(text, 100)), h(tag, { class: "long-text" }, text));
}

// A task's notifications (decision 0057), one line each: the kind, its number, its URL.
function notifyList(notify) {
  const lines = Object.entries(notify)
    .filter(([, target]) => target)
    .map(([kind, target]) => {
      const qualifier = target.after ? ` after ${target.after}` : target.within_seconds ? ` within ${target.within_seconds} s` : "";
      return h("li", {}, `${kind}${qualifier} → `, h("code", {}, target.url));
    });
  return h("ul", { class: "notify" }, lines);
}
