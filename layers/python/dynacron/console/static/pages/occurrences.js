// A table of upcoming occurrences (GET /tasks/{id}/next, POST /schedules/preview):
// each in the schedule's own time zone, the viewer's and UTC, with a row where
// daylight saving changes the zone's offset between two of them, and each one that
// will not run (a skip, a calendar's excluded day) marked with why.

import { h } from "../dom.js";
import { clockTime, formatDay, formatIn, formatUtc, offsetLabel, offsetMinutes, viewerZone } from "../time.js";

export function occurrencesTable(preview, { caption }) {
  const zone = preview.timezone || "UTC";
  const showZone = zone !== viewerZone && zone !== "UTC";
  const changes = new Map((preview.dst_transitions || []).map((c) => [c.next_occurrence, c]));
  const skipped = new Map((preview.skipped || []).map((s) => [s.occurrence, s.reason]));
  const columns = 2 + (showZone ? 1 : 0) + 1 + (skipped.size ? 1 : 0);
  const rows = [];
  preview.occurrences.forEach((occurrence, index) => {
    const change = changes.get(occurrence);
    if (change) rows.push(transitionRow(change, zone, columns));
    const reason = skipped.get(occurrence);
    const classes = [change ? "after-transition" : "", reason ? "skipped-occurrence" : ""].join(" ").trim();
    rows.push(
      h(
        "tr",
        { class: classes || null },
        h("td", { class: "numeric" }, String(index + 1)),
        showZone ? h("td", {}, formatIn(occurrence, zone)) : null,
        h("td", {}, formatIn(occurrence)),
        h("td", { class: "utc-cell" }, formatUtc(occurrence)),
        skipped.size
          ? h("td", {}, reason ? [h("span", { class: "skip-label" }, "Skipped"), ` ${reason}`] : "Runs")
          : null,
      ),
    );
  });
  if (!preview.occurrences.length) {
    rows.push(h("tr", {}, h("td", { colspan: String(columns), class: "muted" }, "No upcoming occurrence.")));
  }
  return h(
    "table",
    { class: "data compact occurrences" },
    h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { scope: "col", class: "numeric" }, "#"),
        showZone ? h("th", { scope: "col" }, `Task's time (${zone})`) : null,
        h("th", { scope: "col" }, `Your time (${viewerZone})`),
        h("th", { scope: "col" }, "UTC"),
        skipped.size ? h("th", { scope: "col" }, "Runs?") : null,
      ),
    ),
    h("tbody", {}, rows),
  );
}

function transitionRow(change, zone, columns) {
  const shift = offsetMinutes(change.offset_after) - offsetMinutes(change.offset_before);
  const size = Math.abs(shift) % 60 === 0 ? `${Math.abs(shift) / 60} h` : `${Math.abs(shift)} min`;
  const direction = shift > 0 ? "forward" : "back";
  // The wall clock just before and after the change: the instant read with each offset.
  const at = new Date(change.at).getTime();
  const wall = (offset) => clockTime(new Date(at + offsetMinutes(offset) * 60000).toISOString(), "UTC");
  const day = formatDay(change.at, zone);
  return h(
    "tr",
    { class: "dst-row" },
    h(
      "td",
      { colspan: String(columns) },
      h("span", { class: "dst-label" }, "Daylight saving"),
      ` ${day}: clocks in ${zone} go ${direction} ${size}, ${wall(change.offset_before)} → ${wall(change.offset_after)} `,
      `(${offsetLabel(change.offset_before)} → ${offsetLabel(change.offset_after)}); `,
      "the occurrences below are on the new offset.",
    ),
  );
}
