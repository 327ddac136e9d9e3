// A task's change history (GET /tasks/{id}/changes): who changed what, when, each
// field before → after, and a revert of a change's "before" (POST /tasks/{id}/revert,
// with the version read: a change in between is refused, not undone).

import { api, describeError } from "../api.js";
import { confirmAction } from "../dialogs.js";
import { fill, h } from "../dom.js";
import { timeCell } from "../time.js";

const CHANGES_PAGE = 20;
// What a PATCH can send back; a change of status alone is undone by pause or resume.
const REVERTIBLE = new Set([
  "cron", "rate", "at", "fixed_delay", "after", "name", "timezone", "dst", "anchor", "start_at",
  "end_at", "handler_url", "handler", "target", "payload", "retry", "catchup",
  "catchup_window_seconds", "jitter_seconds", "overlap", "max_concurrency", "tags",
]);

/** The history card of task `taskId`; `act(label, call, done)` runs a revert as the
 * page runs its other actions, and `version()` is the task's version as read. */
export function changeHistory(card, taskId, { act, version }) {
  let drawn = null;

  async function load() {
    let page;
    try {
      page = await api("GET", `/tasks/${encodeURIComponent(taskId)}/changes`, { query: { limit: CHANGES_PAGE } });
    } catch (error) {
      page = { error: describeError(error) };
    }
    const fingerprint = JSON.stringify(page);
    if (fingerprint === drawn) return;
    drawn = fingerprint;
    draw(page);
  }

  const revert = async (change) => {
    const confirmed = await confirmAction({
      title: "Revert this change?",
      message: `The fields it changed go back to what they were before it (${fieldNames(change).join(", ")}). A change made since is not undone: the revert is refused instead.`,
      confirmLabel: "Revert",
      danger: false,
    });
    if (!confirmed) return;
    await act(
      "Revert",
      () => api("POST", `/tasks/${encodeURIComponent(taskId)}/revert`, { body: { change_id: change.change_id, version: version() } }),
      () => "Change reverted.",
    );
  };

  function draw(page) {
    const changes = page.items || [];
    fill(
      card,
      h("h2", { id: "changes-heading" }, "Changes"),
      page.error
        ? h("p", { class: "error-text" }, page.error)
        : changes.length
          ? h(
              "div",
              { class: "table-wrap", tabindex: "0", role: "region", "aria-label": "Changes (scrolls sideways)" },
              h(
                "table",
                { class: "data", id: "changes-table" },
                h("caption", { class: "visually-hidden" }, "Changes of this task, newest first"),
                h("thead", {}, h("tr", {}, ["When", "Who", "What", "Fields: before → after", "Revert"].map((l) => h("th", { scope: "col" }, l)))),
                h("tbody", {}, changes.map((change) => changeRow(change, revert))),
              ),
            )
          : h("p", { class: "muted" }, "No change recorded."),
      page.next_token ? h("p", { class: "muted" }, `Showing the latest ${CHANGES_PAGE}; the CLI lists older ones (dynacron tasks changes ${taskId}).`) : null,
    );
  }

  return { load };
}

function fieldNames(change) {
  return Object.keys({ ...change.before, ...change.after }).filter((name) => name !== "version");
}

function shown(value) {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function changeRow(change, revert) {
  const names = fieldNames(change);
  const revertible = Object.entries(change.before).some(([name, value]) => REVERTIBLE.has(name) && value !== null);
  return h(
    "tr",
    { "data-change-id": change.change_id },
    h("td", {}, timeCell(change.at)),
    h("td", {}, h("code", {}, change.who)),
    h("td", {}, change.what, change.note ? h("span", { class: "muted" }, ` (${change.note})`) : null),
    h(
      "td",
      {},
      names.length
        ? h(
            "dl",
            { class: "diff" },
            names.map((name) => [
              h("dt", {}, name),
              h("dd", {}, h("del", {}, shown(change.before[name])), " → ", h("ins", {}, shown(change.after[name]))),
            ]),
          )
        : h("span", { class: "muted" }, "—"),
    ),
    h(
      "td",
      {},
      revertible
        ? h("button", { type: "button", class: "button", "aria-label": `Revert the ${change.what} of ${change.at}`, on: { click: () => revert(change) } }, "Revert")
        : null,
    ),
  );
}
