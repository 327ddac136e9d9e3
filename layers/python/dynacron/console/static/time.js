// Instants as a person reads them: in the viewer's time zone, in UTC, in a
// task's own zone, and relative to now. The API speaks ISO 8601 UTC only.

import { h } from "./dom.js";

export const viewerZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

const formats = new Map();

function formatter(zone, withYear, withSeconds) {
  const key = `${zone}|${withYear}|${withSeconds}`;
  if (!formats.has(key)) {
    formats.set(
      key,
      new Intl.DateTimeFormat(undefined, {
        timeZone: zone,
        weekday: "short",
        day: "numeric",
        month: "short",
        year: withYear ? "numeric" : undefined,
        hour: "2-digit",
        minute: "2-digit",
        second: withSeconds ? "2-digit" : undefined,
        hourCycle: "h23",
        timeZoneName: "short",
      }),
    );
  }
  return formats.get(key);
}

/** "Wed 2 Dec, 14:05:00 CET": `iso` in `zone` (the viewer's by default). */
export function formatIn(iso, zone = viewerZone, { seconds = true } = {}) {
  if (!iso) return "—";
  const date = new Date(iso);
  const withYear = date.getUTCFullYear() !== new Date().getUTCFullYear();
  try {
    return formatter(zone, withYear, seconds).format(date);
  } catch {
    return formatter("UTC", withYear, seconds).format(date); // a zone this browser lacks
  }
}

/** "Sun 28 Mar 2027": the day of `iso` in `zone`. */
export function formatDay(iso, zone = viewerZone) {
  return new Intl.DateTimeFormat(undefined, {
    timeZone: zone,
    weekday: "short",
    day: "numeric",
    month: "short",
    year: "numeric",
  }).format(new Date(iso));
}

/** "2026-12-02 13:05:00 UTC": the instant as the API has it, easier to read. */
export function formatUtc(iso) {
  if (!iso) return "—";
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

/** The hour and minute of `iso` in `zone` ("14:05"), with the seconds if asked. */
export function clockTime(iso, zone = viewerZone, seconds = false) {
  return new Intl.DateTimeFormat(undefined, {
    timeZone: zone,
    hour: "2-digit",
    minute: "2-digit",
    second: seconds ? "2-digit" : undefined,
    hourCycle: "h23",
  }).format(new Date(iso));
}

/** The short name of the viewer's zone at `iso`: "CET", "GMT+5:30". */
function zoneName(iso) {
  const part = new Intl.DateTimeFormat(undefined, { timeZone: viewerZone, timeZoneName: "short" })
    .formatToParts(new Date(iso))
    .find((p) => p.type === "timeZoneName");
  return part ? part.value : "";
}

const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

/** "in 5 minutes", "2 hours ago". */
export function relative(iso, now = Date.now()) {
  if (!iso) return "";
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  const size = Math.abs(seconds);
  if (size < 45) return relativeFormat.format(seconds, "second");
  if (size < 45 * 60) return relativeFormat.format(Math.round(seconds / 60), "minute");
  if (size < 36 * 3600) return relativeFormat.format(Math.round(seconds / 3600), "hour");
  return relativeFormat.format(Math.round(seconds / 86400), "day");
}

/** "850 ms", "12.4 s", "3 min 4 s", "2 h 5 min". */
export function duration(startIso, endIso) {
  if (!startIso || !endIso) return "—";
  const ms = new Date(endIso).getTime() - new Date(startIso).getTime();
  if (ms < 0) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 60) return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** The calendar day of `iso` in `zone`, to compare two instants by. */
function dayOf(iso, zone = viewerZone) {
  return new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit" }).format(new Date(iso));
}

/**
 * A <time> element: the viewer's time, with UTC on a second line. With `sameDayAs`,
 * an instant on that instant's day shows its time only (the row names the day).
 */
export function timeCell(iso, { relativeToNow = false, sameDayAs = null } = {}) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const short = sameDayAs && dayOf(iso) === dayOf(sameDayAs) && dayOf(iso, "UTC") === dayOf(sameDayAs, "UTC");
  return h(
    "time",
    { datetime: iso, class: "instant" },
    h("span", { class: "local" }, short ? `${clockTime(iso, viewerZone, true)} ${zoneName(iso)}` : formatIn(iso)),
    h("span", { class: "utc" }, short ? `${iso.slice(11, 19)} UTC` : formatUtc(iso)),
    relativeToNow ? h("span", { class: "relative" }, relative(iso)) : null,
  );
}

/** A value of an <input type="datetime-local"> (the viewer's wall clock) as ISO 8601 UTC. */
export function fromLocalInput(value) {
  if (!value) return null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** An instant as the value of an <input type="datetime-local"> in the viewer's zone. */
export function toLocalInput(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}

/** "+01:00" as "UTC+01:00"; the hours between two offsets. */
export function offsetLabel(offset) {
  return `UTC${offset}`;
}

export function offsetMinutes(offset) {
  const match = /^([+-])(\d{2}):(\d{2})$/.exec(offset || "");
  if (!match) return 0;
  const minutes = Number(match[2]) * 60 + Number(match[3]);
  return match[1] === "-" ? -minutes : minutes;
}

/** Every IANA zone this browser knows, for a <datalist>. */
export function knownZones() {
  try {
    const zones = Intl.supportedValuesOf("timeZone");
    return zones.includes("UTC") ? zones : ["UTC", ...zones];
  } catch {
    return ["UTC", viewerZone];
  }
}
