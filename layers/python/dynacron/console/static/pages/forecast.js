// The next hours (GET /forecast): how many executions start in each minute, drawn
// as a bar chart (inline SVG) with the peaks marked, and the same numbers as tables.

import { api, describeError } from "../api.js";
import { field, fill, h, select, svg } from "../dom.js";
import { every, setQuery, setTitle } from "../router.js";
import { clockTime, formatDay, formatIn, formatUtc, viewerZone } from "../time.js";

const REFRESH_MS = 30000;
const MINUTE_MS = 60000;
// Minutes at least this share of the busiest one are drawn as peaks too.
const PEAK_SHARE = 0.75;
const WIDTH = 960;
const HEIGHT = 280;
const MARGIN = { top: 34, right: 18, bottom: 40, left: 52 };

export function render(main, { query }) {
  setTitle("Next 24 hours");
  const hours = Math.min(24, Math.max(1, Number(query.get("hours")) || 24));
  const hoursSelect = select(
    "forecast-hours",
    [["1", "1 hour"], ["6", "6 hours"], ["12", "12 hours"], ["24", "24 hours"]],
    String(hours),
  );
  const heading = h("h1", {}, `Next ${hours} hours`);
  const problem = h("div", { class: "alert", role: "alert", hidden: true });
  const body = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  fill(
    main,
    h(
      "div",
      { class: "page-head" },
      heading,
      h("form", { class: "inline-form", "aria-label": "Forecast range", on: { submit: (e) => e.preventDefault() } }, field("Look ahead", hoursSelect)),
    ),
    h(
      "p",
      { class: "lede" },
      "Executions the active tasks will start in each minute, jitter included: a herd shows as a spike before it happens. ",
      "Spread one with H fields in cron or with jitter_seconds.",
    ),
    problem,
    body,
  );
  hoursSelect.addEventListener("change", () => {
    setQuery({ hours: hoursSelect.value === "24" ? "" : hoursSelect.value });
    fill(heading, `Next ${hoursSelect.value} hours`);
    setTitle(`Next ${hoursSelect.value} hours`);
    load();
  });

  async function load() {
    try {
      const forecast = await api("GET", "/forecast", { query: { hours: hoursSelect.value } });
      problem.hidden = true;
      fill(body, view(forecast));
    } catch (error) {
      problem.hidden = false;
      problem.textContent = describeError(error);
    }
  }
  load();
  return every(REFRESH_MS, load);
}

function view(forecast) {
  const total = forecast.per_minute.reduce((sum, m) => sum + m.executions, 0);
  const peak = forecast.peak;
  return h(
    "div",
    {},
    h(
      "ul",
      { class: "stats", "aria-label": "Summary" },
      stat("Executions", total.toLocaleString()),
      stat("Tasks counted", forecast.tasks.toLocaleString()),
      stat("Busiest minute", peak ? `${clockTime(peak.minute)} · ${peak.executions}` : "—", peak ? formatUtc(peak.minute) : null),
    ),
    forecast.complete
      ? null
      : h("p", { class: "notice" }, "Not every occurrence was counted (the forecast's work is bounded): these counts are a lower bound."),
    h("figure", { class: "card chart-card" }, chart(forecast, total), h("figcaption", {}, legend())),
    h("div", { class: "grid" }, busiestTable(forecast), hourlyTable(forecast)),
  );
}

function stat(label, value, detail) {
  return h("li", { class: "stat" }, h("span", { class: "stat-label" }, label), h("span", { class: "stat-value" }, value), detail ? h("span", { class: "stat-detail" }, detail) : null);
}

function legend() {
  return h(
    "span",
    { class: "legend" },
    h("span", { class: "swatch swatch-bar", "aria-hidden": "true" }),
    " executions starting in a minute  ",
    h("span", { class: "swatch swatch-peak", "aria-hidden": "true" }),
    ` a peak (at least ${Math.round(PEAK_SHARE * 100)}% of the busiest minute) · times in ${viewerZone}`,
  );
}

function niceStep(max) {
  const rough = max / 4;
  const power = 10 ** Math.floor(Math.log10(Math.max(rough, 1)));
  for (const factor of [1, 2, 5, 10]) if (factor * power >= rough) return factor * power;
  return 10 * power;
}

function chart(forecast, total) {
  const start = new Date(forecast.start).getTime();
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const peakCount = forecast.peak ? forecast.peak.executions : 0;
  const step = niceStep(Math.max(peakCount, 1));
  const top = Math.max(step, Math.ceil(peakCount / step) * step);
  const x = (ms) => MARGIN.left + ((ms - start) / (forecast.minutes * MINUTE_MS)) * plotWidth;
  const y = (count) => MARGIN.top + plotHeight - (count / top) * plotHeight;
  const barWidth = Math.max(1.5, plotWidth / forecast.minutes);
  const parts = [];

  for (let value = 0; value <= top; value += step) {
    parts.push(svg("line", { class: "grid-line", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value), y2: y(value) }));
    parts.push(svg("text", { class: "axis-label", x: MARGIN.left - 8, y: y(value) + 4, "text-anchor": "end" }, String(value)));
  }
  // Hour ticks on the viewer's clock: every hour for a short range, else every 3.
  const every = forecast.minutes <= 360 ? 1 : 3;
  const firstHour = Math.ceil(start / (MINUTE_MS * 60)) * MINUTE_MS * 60;
  for (let ms = firstHour; ms <= start + forecast.minutes * MINUTE_MS; ms += MINUTE_MS * 60) {
    const date = new Date(ms);
    const localHour = Number(clockTime(date.toISOString()).slice(0, 2));
    if (localHour % every !== 0) continue;
    parts.push(svg("line", { class: "tick", x1: x(ms), x2: x(ms), y1: MARGIN.top + plotHeight, y2: MARGIN.top + plotHeight + 5 }));
    parts.push(svg("text", { class: "axis-label", x: x(ms), y: HEIGHT - MARGIN.bottom + 20, "text-anchor": "middle" }, clockTime(date.toISOString())));
  }
  parts.push(svg("line", { class: "axis", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(0), y2: y(0) }));
  parts.push(svg("text", { class: "axis-title", x: MARGIN.left, y: 16 }, "executions per minute"));

  for (const minute of forecast.per_minute) {
    const ms = new Date(minute.minute).getTime();
    const isPeak = peakCount > 0 && minute.executions >= PEAK_SHARE * peakCount;
    parts.push(
      svg(
        "rect",
        { class: isPeak ? "bar peak" : "bar", x: x(ms), y: y(minute.executions), width: barWidth, height: Math.max(0.5, y(0) - y(minute.executions)) },
        svg("title", {}, `${formatIn(minute.minute, viewerZone, { seconds: false })}: ${minute.executions}`),
      ),
    );
  }
  if (forecast.peak) {
    const ms = new Date(forecast.peak.minute).getTime();
    const px = x(ms) + barWidth / 2;
    const py = y(forecast.peak.executions);
    const label = `peak ${forecast.peak.executions} at ${clockTime(forecast.peak.minute)}`;
    const anchor = px > WIDTH - 160 ? "end" : px < MARGIN.left + 80 ? "start" : "middle";
    parts.push(svg("circle", { class: "peak-marker", cx: px, cy: py - 7, r: 4 }));
    parts.push(svg("text", { class: "peak-label", x: px, y: py - 15, "text-anchor": anchor }, label));
  }
  const description = forecast.peak
    ? `${total} executions from ${forecast.tasks} tasks in the next ${forecast.minutes / 60} hours; the busiest minute is ${formatIn(forecast.peak.minute, viewerZone, { seconds: false })} with ${forecast.peak.executions}. The tables below give the same numbers.`
    : `No executions in the next ${forecast.minutes / 60} hours.`;
  return svg(
    "svg",
    {
      class: "chart",
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      role: "img",
      "aria-labelledby": "chart-title chart-desc",
      preserveAspectRatio: "xMidYMid meet",
    },
    svg("title", { id: "chart-title" }, "Executions starting per minute"),
    svg("desc", { id: "chart-desc" }, description),
    parts,
  );
}

function busiestTable(forecast) {
  const busiest = [...forecast.per_minute].sort((a, b) => b.executions - a.executions || (a.minute < b.minute ? -1 : 1)).slice(0, 10);
  return h(
    "section",
    { class: "card", "aria-labelledby": "busiest-heading" },
    h("h2", { id: "busiest-heading" }, "Busiest minutes"),
    busiest.length
      ? h(
          "table",
          { class: "data compact" },
          h("caption", { class: "visually-hidden" }, "The ten busiest minutes ahead"),
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Minute (your time)"), h("th", { scope: "col" }, "UTC"), h("th", { scope: "col", class: "numeric" }, "Executions"))),
          h(
            "tbody",
            {},
            busiest.map((m) =>
              h("tr", {}, h("td", { class: "nowrap" }, formatIn(m.minute, viewerZone, { seconds: false })), h("td", { class: "utc-cell" }, formatUtc(m.minute)), h("td", { class: "numeric" }, String(m.executions))),
            ),
          ),
        )
      : h("p", { class: "muted" }, "Nothing runs in this range."),
  );
}

function hourlyTable(forecast) {
  // By the hours of the clock: the first and last are the parts of them in range.
  const start = new Date(forecast.start).getTime();
  const firstHour = Math.floor(start / 3600_000) * 3600_000;
  const end = start + forecast.minutes * MINUTE_MS;
  const hours = [];
  for (let from = firstHour; from < end; from += 3600_000) hours.push({ from, total: 0, busiest: 0 });
  for (const m of forecast.per_minute) {
    const index = Math.floor((new Date(m.minute).getTime() - firstHour) / 3600_000);
    const hour = hours[index];
    if (!hour) continue;
    hour.total += m.executions;
    hour.busiest = Math.max(hour.busiest, m.executions);
  }
  return h(
    "section",
    { class: "card", "aria-labelledby": "hourly-heading" },
    h("h2", { id: "hourly-heading" }, "Hour by hour"),
    h(
      "div",
      { class: "scroll-box", tabindex: "0", role: "region", "aria-label": "Hour by hour table" },
      h(
        "table",
        { class: "data compact" },
        h("caption", { class: "visually-hidden" }, "Executions in each hour ahead"),
        h(
          "thead",
          {},
          h("tr", {}, h("th", { scope: "col" }, "Hour (your time)"), h("th", { scope: "col", class: "numeric" }, "Executions"), h("th", { scope: "col", class: "numeric" }, "Busiest minute")),
        ),
        h(
          "tbody",
          {},
          hours.map((hour) =>
            h(
              "tr",
              {},
              h("td", { class: "nowrap" }, hourLabel(hour.from)),
              h("td", { class: "numeric" }, String(hour.total)),
              h("td", { class: "numeric" }, String(hour.busiest)),
            ),
          ),
        ),
      ),
    ),
  );
}

/** "Wed 2 Dec 2026, 14:00–15:00" on the viewer's clock. */
function hourLabel(from) {
  const start = new Date(from).toISOString();
  const end = new Date(from + 3600_000).toISOString();
  return `${formatDay(start)}, ${clockTime(start)}–${clockTime(end)}`;
}
