// Create a task, or edit one: a form that the API validates (its 422 problems are
// shown next to the fields they name), with the next occurrences previewed before
// saving (POST /schedules/preview: the same checks as POST /tasks, nothing stored).

import { api, ApiError, describeError } from "../api.js";
import { announce, describedBy, field, fill, h, link, select, undescribedBy } from "../dom.js";
import { BASE, navigate, reload, setTitle, taskPath } from "../router.js";
import { knownZones, viewerZone } from "../time.js";
import { occurrencesTable } from "./occurrences.js";

// Tasks offered to run after, by name, a page of the API's at a time: a name search
// finds any other (GET /tasks?name_prefix=), however many the tenant has.
const UPSTREAM_CHOICES = 100;
const SEARCH_DELAY_MS = 250;

const KINDS = [
  ["cron", "Cron", "5 fields (or 6 with seconds first): minute hour day-of-month month day-of-week. Names, L, W, #, ? and H work; so do @daily and @hourly.", "0 9 * * MON-FRI"],
  ["rate", "Rate", "Every N seconds, minutes, hours or days of elapsed time: '30 seconds', '5 minutes', '1 day'.", "5 minutes"],
  ["at", "One time", "An ISO 8601 instant; without an offset it is read in the time zone below.", "2026-12-24T18:00:00"],
  ["fixed_delay", "Fixed delay", "This long after the previous execution ended, so runs never overlap: '10 minutes'.", "10 minutes"],
  ["after", "After another task", "Runs once after each successful execution of the task chosen here.", ""],
];
const SCHEDULE_FIELDS = ["cron", "rate", "at", "fixed_delay", "after", "timezone", "dst", "anchor", "start_at", "end_at"];
const PREVIEW_DELAY_MS = 450;
const RETRY_DEFAULTS = { max_attempts: 5, base_delay_seconds: 5, max_delay_seconds: 600 };

export function render(main, { params, edit }) {
  const taskId = edit ? params[0] : null;
  setTitle(edit ? "Edit task" : "New task");
  const heading = h("h1", {}, edit ? "Edit task" : "New task");
  const holder = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  fill(
    main,
    h("p", { class: "breadcrumb" }, link(`${BASE}/tasks`, "Tasks"), " / ", edit ? link(taskPath(taskId), "Task") : null),
    h("div", { class: "page-head" }, heading),
    holder,
  );
  let stopped = false;
  (async () => {
    let task = null;
    let others = [];
    try {
      const [loaded, listed] = await Promise.all([
        edit ? api("GET", `/tasks/${encodeURIComponent(taskId)}`) : Promise.resolve(null),
        api("GET", "/tasks", { query: { sort: "name", limit: UPSTREAM_CHOICES } }).catch(() => ({ items: [] })),
      ]);
      task = loaded;
      others = listed.items.filter((t) => t.task_id !== taskId);
      // The task it runs after now is offered, wherever it sorts.
      const upstream = task && task.schedule.kind === "after" ? task.schedule.expression : null;
      if (upstream && !others.some((t) => t.task_id === upstream)) {
        const current = await api("GET", `/tasks/${encodeURIComponent(upstream)}`).catch(() => null);
        if (current) others.unshift(current);
      }
    } catch (error) {
      fill(holder, h("div", { class: "alert", role: "alert" }, describeError(error)));
      return;
    }
    if (stopped) return;
    if (task) fill(heading, `Edit ${task.name}`);
    buildForm(holder, task, others);
  })();
  return () => {
    stopped = true;
  };
}

function upstreamOption(task) {
  return h("option", { value: task.task_id }, `${task.name} (${task.task_id.slice(0, 8)})`);
}

// A search box that fills `choices` with the tasks whose name starts with what is
// typed (the API's name index), keeping the task chosen so far.
function upstreamFinder(choices, task) {
  const finder = h("input", { id: "f-after-search", type: "search", autocomplete: "off", spellcheck: "false" });
  let typing = null;
  let asked = 0;
  finder.addEventListener("input", () => {
    window.clearTimeout(typing);
    typing = window.setTimeout(async () => {
      const prefix = finder.value.trim();
      asked += 1;
      const mine = asked;
      const query = prefix ? { name_prefix: prefix, limit: UPSTREAM_CHOICES } : { sort: "name", limit: UPSTREAM_CHOICES };
      let page;
      try {
        page = await api("GET", "/tasks", { query });
      } catch (error) {
        announce(describeError(error), "error");
        return;
      }
      if (mine !== asked) return;
      const chosen = choices.value;
      const kept = chosen ? [...choices.options].find((o) => o.value === chosen) : null;
      const found = page.items.filter((t) => t.task_id !== task?.task_id && t.task_id !== chosen);
      fill(choices, h("option", { value: "" }, "Choose a task"), kept, ...found.map(upstreamOption));
      choices.value = chosen;
      announce(`${found.length}${page.next_token ? "+" : ""} task${found.length === 1 ? "" : "s"} to choose from.`);
    }, SEARCH_DELAY_MS);
  });
  return finder;
}

function buildForm(holder, task, others) {
  const controls = {};
  const errorSlots = {};
  const idempotencyKey = crypto.randomUUID();
  let initialBody = null;

  // One control per API field; its id is the field's name, so a problem's
  // "field" finds it.
  const input = (name, attributes = {}) => {
    const control = h("input", { id: `f-${name}`, name, type: "text", autocomplete: "off", spellcheck: "false", ...attributes });
    controls[name] = control;
    return control;
  };
  const withError = (name, element) => {
    const slot = h("p", { class: "field-error", id: `err-${name.replace(/\./g, "-")}`, hidden: true });
    errorSlots[name] = slot;
    element.append(slot);
    return element;
  };
  const labelled = (name, label, control, hint) => withError(name, field(label, control, hint));

  // Basics
  const name = input("name", { maxlength: "200" });
  const handlerUrl = input("handler_url", { type: "url", inputmode: "url", placeholder: "http://127.0.0.1:9000/hook" });
  const handlerName = input("handler", { maxlength: "128" });

  // Schedule
  const kindRadios = KINDS.map(([value, label]) =>
    h("label", { class: "radio" }, h("input", { type: "radio", name: "kind", value, id: `kind-${value}` }), ` ${label}`),
  );
  const kindFieldset = h("fieldset", { class: "kinds" }, h("legend", {}, "Kind of schedule"), kindRadios);
  controls.schedule = kindRadios[0].querySelector("input");
  const kindInputs = {};
  const kindFields = {};
  for (const [value, label, hint, example] of KINDS) {
    let control;
    if (value === "after") {
      control = h("select", { id: "f-after", name: "after" }, h("option", { value: "" }, "Choose a task"), others.map(upstreamOption));
      controls.after = control;
    } else {
      control = input(value, { placeholder: example, maxlength: value === "cron" ? "200" : "64", class: "mono" });
    }
    kindInputs[value] = control;
    kindFields[value] = labelled(value, { cron: "Cron expression", rate: "Rate", at: "When", fixed_delay: "Delay", after: "After task" }[value] || label, control, hint);
    if (value === "after") {
      const finder = upstreamFinder(control, task);
      kindFields[value] = h("div", {}, field("Find the task by name", finder, "the start of its name, any case"), kindFields[value]);
    }
  }
  const timezone = input("timezone", { list: "zones", value: "UTC", maxlength: "64" });
  const zoneList = h("datalist", { id: "zones" }, knownZones().map((z) => h("option", { value: z })));
  const useMine = h("button", { type: "button", class: "button small", on: { click: () => { timezone.value = viewerZone; schedulePreview(); } } }, `Use mine (${viewerZone})`);
  const nonexistent = select("f-dst.nonexistent", [["shift", "Run just after the gap (shift)"], ["skip", "Skip it"]], "shift");
  const ambiguous = select("f-dst.ambiguous", [["first", "The first time"], ["last", "The second time"], ["both", "Both times"]], "first");
  controls["dst.nonexistent"] = nonexistent;
  controls["dst.ambiguous"] = ambiguous;
  const dstFields = h(
    "div",
    { class: "row" },
    labelled("dst.nonexistent", "A time the clocks skip", nonexistent),
    labelled("dst.ambiguous", "A time the clocks repeat", ambiguous),
  );
  const anchor = input("anchor", { placeholder: "2026-12-01T00:00:00Z" });
  const anchorField = labelled("anchor", "Anchor (optional)", anchor, "The first occurrence; every later one is a whole number of periods after it.");
  const startAt = input("start_at", { placeholder: "2026-12-01T00:00:00" });
  const endAt = input("end_at", { placeholder: "2027-06-30T00:00:00" });

  // Tags
  const tagRows = h("div", { class: "tag-rows" });
  let tagCount = 0;
  const addTag = (key = "", value = "") => {
    tagCount += 1;
    const n = tagCount;
    const keyInput = h("input", { id: `tag-key-${n}`, type: "text", value: key, class: "tag-key", maxlength: "63", autocomplete: "off", spellcheck: "false" });
    const valueInput = h("input", { id: `tag-value-${n}`, type: "text", value, class: "tag-value", maxlength: "256", autocomplete: "off" });
    const row = h(
      "div",
      { class: "tag-row" },
      field("Key", keyInput),
      field("Value", valueInput),
      h("button", { type: "button", class: "button small subtle", "aria-label": `Remove tag ${n}`, on: { click: () => { row.remove(); addTagButton.focus(); } } }, "Remove"),
    );
    tagRows.append(row);
    return keyInput;
  };
  const addTagButton = h("button", { type: "button", class: "button small", on: { click: () => addTag().focus() } }, "Add a tag");
  const tagsFieldset = withError("tags", h("fieldset", { class: "tags-fieldset", id: "f-tags", tabindex: "-1" }, h("legend", {}, "Tags"), h("p", { class: "hint" }, "Labels to find the task by: keys of letters, digits, _ . - and /."), tagRows, addTagButton));
  controls.tags = tagsFieldset;

  const payload = h("textarea", { id: "f-payload", name: "payload", rows: "5", class: "mono", spellcheck: "false" }, "{}");
  controls.payload = payload;

  // Advanced
  const number = (name, min, value) => input(name, { type: "number", min: String(min), step: "1", value: value === undefined ? "" : String(value), inputmode: "numeric" });
  const maxAttempts = number("retry.max_attempts", 1, RETRY_DEFAULTS.max_attempts);
  const baseDelay = number("retry.base_delay_seconds", 1, RETRY_DEFAULTS.base_delay_seconds);
  const maxDelay = number("retry.max_delay_seconds", 1, RETRY_DEFAULTS.max_delay_seconds);
  const catchup = select("f-catchup", [["run_once", "Run once (run_once)"], ["skip", "Skip them (skip)"], ["run_all", "Run each (run_all)"]], "run_once");
  controls.catchup = catchup;
  const catchupWindow = number("catchup_window_seconds", 1);
  const overlap = select("f-overlap", [["allow", "Run anyway (allow)"], ["skip", "Skip it (skip)"], ["buffer_one", "Run it after (buffer_one)"]], "allow");
  controls.overlap = overlap;
  const jitter = number("jitter_seconds", 0, 0);
  const maxConcurrency = number("max_concurrency", 1);

  const previewHolder = h("div", { class: "preview-body" }, h("p", { class: "muted" }, "Choose a schedule to see its next occurrences."));
  const previewButton = h("button", { type: "button", class: "button", on: { click: () => runPreview(true) } }, "Preview");
  const summary = h("div", { class: "error-summary", tabindex: "-1", hidden: true });
  const submit = h("button", { type: "submit", class: "button primary" }, task ? "Save changes" : "Create task");
  const conflict = h("div", { class: "alert", role: "alert", hidden: true });

  const form = h(
    "form",
    { class: "task-form", novalidate: true, "aria-labelledby": "form-title" },
    h("h2", { id: "form-title", class: "visually-hidden" }, task ? "Task settings" : "New task settings"),
    summary,
    conflict,
    h(
      "section",
      { class: "card", "aria-labelledby": "basics-heading" },
      h("h2", { id: "basics-heading" }, "Task"),
      labelled("name", "Name", name, "Shown in lists; defaults to the task id."),
      labelled("handler_url", "Handler URL", handlerUrl, "Receives a POST with the payload at each execution; in local mode a loopback address."),
    ),
    h(
      "section",
      { class: "card", "aria-labelledby": "schedule-heading" },
      h("h2", { id: "schedule-heading" }, "Schedule"),
      withError("schedule", kindFieldset),
      Object.values(kindFields),
      h("div", { class: "row" }, h("div", { class: "grow" }, labelled("timezone", "Time zone", timezone, "IANA name; cron times are on its wall clock.")), h("div", { class: "align-end" }, useMine)),
      zoneList,
      dstFields,
      anchorField,
      h("div", { class: "row" }, labelled("start_at", "Not before (optional)", startAt), labelled("end_at", "Not after (optional)", endAt)),
      h("p", { class: "hint" }, "Instants are ISO 8601; without an offset they are read in the time zone above."),
    ),
    h(
      "section",
      { class: "card preview", "aria-labelledby": "preview-heading", "aria-busy": "false", id: "preview" },
      h("div", { class: "section-head" }, h("h2", { id: "preview-heading" }, "Preview"), previewButton),
      previewHolder,
    ),
    h(
      "section",
      { class: "card", "aria-labelledby": "payload-heading" },
      h("h2", { id: "payload-heading" }, "Payload and tags"),
      labelled("payload", "Payload (a JSON object)", payload, "Sent to the handler as the body's payload."),
      tagsFieldset,
    ),
    h(
      "details",
      { class: "card advanced" },
      h("summary", {}, h("span", { class: "summary-title" }, "Retries, catch-up, overlap and limits")),
      h(
        "div",
        { class: "row" },
        labelled("retry.max_attempts", "Attempts in all", maxAttempts),
        labelled("retry.base_delay_seconds", "First backoff (s)", baseDelay),
        labelled("retry.max_delay_seconds", "Longest backoff (s)", maxDelay),
      ),
      h("div", { class: "row" }, labelled("catchup", "Occurrences missed during downtime", catchup), labelled("catchup_window_seconds", "Catch-up window (s, run_all only)", catchupWindow)),
      h("div", { class: "row" }, labelled("overlap", "Due while the previous run runs", overlap), labelled("jitter_seconds", "Jitter (s)", jitter), labelled("max_concurrency", "Max concurrent executions", maxConcurrency)),
      labelled("handler", "Python handler (instead of a URL)", handlerName, "The name of a handler registered in local mode with --handlers."),
    ),
    h("div", { class: "form-actions" }, submit, h("a", { href: task ? taskPath(task.task_id) : `${BASE}/tasks`, "data-route": "", class: "button subtle" }, "Cancel")),
  );
  fill(holder, form);

  const kind = () => form.querySelector("input[name=kind]:checked")?.value || "cron";
  const showKind = () => {
    const chosen = kind();
    for (const [value] of KINDS) kindFields[value].hidden = value !== chosen;
    dstFields.hidden = !["cron", "at"].includes(chosen);
    anchorField.hidden = chosen !== "rate";
  };

  // Prefill: a new task starts as a weekday-morning cron; an edit shows the task.
  if (task) {
    const chosen = task.schedule.kind === "unreadable" ? "cron" : task.schedule.kind;
    form.querySelector(`#kind-${chosen}`).checked = true;
    if (task.schedule.kind !== "unreadable") kindInputs[chosen].value = task.schedule.expression;
    name.value = task.name;
    handlerUrl.value = task.handler_url || "";
    handlerName.value = task.handler || "";
    timezone.value = task.timezone;
    if (task.dst) {
      nonexistent.value = task.dst.nonexistent;
      ambiguous.value = task.dst.ambiguous;
    }
    anchor.value = task.anchor || "";
    startAt.value = task.start_at || "";
    endAt.value = task.end_at || "";
    payload.value = JSON.stringify(task.payload, null, 2);
    for (const [key, value] of Object.entries(task.tags || {})) addTag(key, value);
    maxAttempts.value = String(task.retry.max_attempts);
    baseDelay.value = String(task.retry.base_delay_seconds);
    maxDelay.value = String(task.retry.max_delay_seconds);
    catchup.value = task.catchup;
    catchupWindow.value = task.catchup_window_seconds ? String(task.catchup_window_seconds) : "";
    overlap.value = task.overlap;
    jitter.value = String(task.jitter_seconds);
    maxConcurrency.value = task.max_concurrency ? String(task.max_concurrency) : "";
  } else {
    form.querySelector("#kind-cron").checked = true;
    timezone.value = viewerZone;
  }
  showKind();

  // --- the body, as the API takes it ---
  function integer(control) {
    const text = control.value.trim();
    if (!text) return undefined;
    const value = Number(text);
    return Number.isInteger(value) ? value : text; // the API names what is wrong with it
  }

  function bodyOf() {
    const chosen = kind();
    const body = {};
    if (name.value.trim()) body.name = name.value.trim();
    const expression = kindInputs[chosen].value.trim();
    body[chosen] = expression;
    body.timezone = timezone.value.trim() || "UTC";
    if (["cron", "at"].includes(chosen)) body.dst = { nonexistent: nonexistent.value, ambiguous: ambiguous.value };
    if (chosen === "rate" && anchor.value.trim()) body.anchor = anchor.value.trim();
    if (startAt.value.trim()) body.start_at = startAt.value.trim();
    if (endAt.value.trim()) body.end_at = endAt.value.trim();
    if (handlerName.value.trim()) body.handler = handlerName.value.trim();
    if (handlerUrl.value.trim() || !body.handler) body.handler_url = handlerUrl.value.trim();
    body.retry = {
      max_attempts: integer(maxAttempts) ?? RETRY_DEFAULTS.max_attempts,
      base_delay_seconds: integer(baseDelay) ?? RETRY_DEFAULTS.base_delay_seconds,
      max_delay_seconds: integer(maxDelay) ?? RETRY_DEFAULTS.max_delay_seconds,
    };
    body.catchup = catchup.value;
    const window = integer(catchupWindow);
    if (window !== undefined) body.catchup_window_seconds = window;
    body.overlap = overlap.value;
    body.jitter_seconds = integer(jitter) ?? 0;
    const concurrency = integer(maxConcurrency);
    if (concurrency !== undefined) body.max_concurrency = concurrency;
    body.tags = {};
    for (const row of tagRows.querySelectorAll(".tag-row")) {
      const key = row.querySelector(".tag-key").value.trim();
      const value = row.querySelector(".tag-value").value;
      if (key || value) body.tags[key] = value;
    }
    return body;
  }

  /** Problems found before asking the API: only what it cannot be sent at all. */
  function localProblems() {
    const problems = [];
    let parsed;
    try {
      parsed = JSON.parse(payload.value.trim() || "{}");
    } catch (error) {
      problems.push({ field: "payload", message: `is not valid JSON (${error.message})` });
    }
    if (parsed !== undefined && (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))) {
      problems.push({ field: "payload", message: "must be a JSON object, such as {} or {\"report\": \"daily\"}" });
    }
    for (const row of tagRows.querySelectorAll(".tag-row")) {
      if (!row.querySelector(".tag-key").value.trim() && row.querySelector(".tag-value").value) {
        problems.push({ field: "tags", message: "a tag has a value but no key" });
      }
    }
    return { problems, payload: parsed };
  }

  // --- field errors ---
  function slotFor(fieldName) {
    if (fieldName === "handler" && !handlerName.value.trim()) return "handler_url";
    if (errorSlots[fieldName]) return fieldName;
    if (fieldName === "schedule") return kind();
    if (fieldName === "dst") return "dst.nonexistent";
    if (fieldName === "retry") return "retry.max_attempts";
    if (fieldName === "rate_limit") return "max_concurrency";
    const head = fieldName.split(".")[0];
    if (errorSlots[head]) return head;
    return null;
  }

  function clearErrors(fields = null) {
    for (const [fieldName, slot] of Object.entries(errorSlots)) {
      if (fields && !fields.includes(fieldName.split(".")[0])) continue;
      slot.hidden = true;
      slot.textContent = "";
      const control = controls[fieldName];
      if (control) {
        control.removeAttribute("aria-invalid");
        undescribedBy(control, slot.id);
      }
    }
  }

  function showErrors(errors, { summarise }) {
    const listed = [];
    for (const error of errors) {
      const target = slotFor(error.field);
      const text = `${error.field}: ${error.message}`;
      if (target) {
        const slot = errorSlots[target];
        slot.hidden = false;
        slot.textContent = slot.textContent ? `${slot.textContent} ${text}` : text;
        slot.closest("details")?.setAttribute("open", "");
        const control = controls[target] || kindInputs[target];
        if (control) {
          control.setAttribute("aria-invalid", "true");
          describedBy(control, slot.id);
        }
      }
      listed.push({ target, text });
    }
    if (!summarise) return;
    summary.hidden = false;
    summary.setAttribute("aria-labelledby", "error-summary-title");
    fill(
      summary,
      h("h2", { id: "error-summary-title" }, errors.length === 1 ? "The API refused one field" : `The API refused ${errors.length} fields`),
      h(
        "ul",
        {},
        listed.map(({ target, text }) => {
          const control = target ? controls[target] || kindInputs[target] : null;
          if (!control) return h("li", {}, text);
          return h("li", {}, h("a", { href: `#${control.id}`, on: { click: (e) => { e.preventDefault(); control.focus(); } } }, text));
        }),
      ),
    );
    summary.focus();
  }

  // --- preview ---
  let previewTimer = null;
  let previewSequence = 0;
  function schedulePreview() {
    window.clearTimeout(previewTimer);
    previewTimer = window.setTimeout(() => runPreview(false), PREVIEW_DELAY_MS);
  }

  async function runPreview(asked) {
    window.clearTimeout(previewTimer);
    const body = bodyOf();
    const chosen = kind();
    if (!body[chosen]) {
      fill(previewHolder, h("p", { class: "muted" }, "Give the schedule to see its next occurrences."));
      return;
    }
    const previewBody = { count: 10 };
    for (const key of SCHEDULE_FIELDS) if (body[key] !== undefined) previewBody[key] = body[key];
    const sequence = ++previewSequence;
    previewHolder.parentElement.setAttribute("aria-busy", "true");
    try {
      const preview = await api("POST", "/schedules/preview", { body: previewBody });
      if (sequence !== previewSequence) return;
      clearErrors(SCHEDULE_FIELDS.concat("schedule"));
      const spread = chosen === "cron" && /(^|[\s,])H/.test(body.cron);
      fill(
        previewHolder,
        h("p", { class: "explanation" }, preview.explanation),
        spread ? h("p", { class: "hint" }, "H fields are spread by the task's id, given when it is saved: these times are an example; the task's page shows its own.") : null,
        chosen === "after" ? h("p", { class: "hint" }, "It runs when the other task succeeds, so no times can be listed.") : null,
        preview.occurrences.length || chosen !== "after" ? occurrencesTable(preview, { caption: "Next occurrences if saved now" }) : null,
      );
      if (asked) announce(`Preview: ${preview.occurrences.length} occurrences. ${preview.explanation}`);
    } catch (error) {
      if (sequence !== previewSequence) return;
      clearErrors(SCHEDULE_FIELDS.concat("schedule"));
      if (error instanceof ApiError && error.errors.length) {
        showErrors(error.errors, { summarise: false });
        fill(previewHolder, h("p", { class: "error-text" }, "No preview: ", error.errors.map((e) => `${e.field}: ${e.message}`).join("; ")));
      } else {
        fill(previewHolder, h("p", { class: "error-text" }, describeError(error)));
      }
      if (asked) announce("The schedule was refused; see the messages next to its fields.", "error");
    } finally {
      if (sequence === previewSequence) previewHolder.parentElement.setAttribute("aria-busy", "false");
    }
  }

  for (const control of [...Object.values(kindInputs), timezone, nonexistent, ambiguous, anchor, startAt, endAt]) {
    control.addEventListener("input", schedulePreview);
    control.addEventListener("change", schedulePreview);
  }
  for (const radio of form.querySelectorAll("input[name=kind]")) {
    radio.addEventListener("change", () => {
      showKind();
      schedulePreview();
    });
  }

  // --- save ---
  if (task) initialBody = bodyOfWithPayload(JSON.parse(JSON.stringify(task.payload)));

  function bodyOfWithPayload(parsedPayload) {
    const body = bodyOf();
    body.payload = parsedPayload;
    return body;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    summary.hidden = true;
    conflict.hidden = true;
    const { problems, payload: parsedPayload } = localProblems();
    if (problems.length) {
      showErrors(problems, { summarise: true });
      return;
    }
    const body = bodyOfWithPayload(parsedPayload);
    submit.disabled = true;
    try {
      let saved;
      if (task) {
        const changes = { version: task.version };
        for (const [key, value] of Object.entries(body)) {
          if (JSON.stringify(value) !== JSON.stringify(initialBody[key])) changes[key] = value;
        }
        saved = await api("PATCH", `/tasks/${encodeURIComponent(task.task_id)}`, { body: changes });
        announce(`Saved ${saved.name} (version ${saved.version}).`);
      } else {
        saved = await api("POST", "/tasks", { body, headers: { "Idempotency-Key": idempotencyKey } });
        announce(`Created ${saved.name}.`);
      }
      navigate(taskPath(saved.task_id));
    } catch (error) {
      submit.disabled = false;
      if (error instanceof ApiError && error.status === 409 && task) {
        conflict.hidden = false;
        fill(
          conflict,
          h("strong", {}, "This task changed since you opened it. "),
          `Your changes were made to version ${task.version}; someone (or the scheduler) saved a newer one, so nothing was saved. `,
          h("button", { type: "button", class: "button small", on: { click: reload } }, "Load the current version"),
          " and make your changes again.",
        );
        conflict.setAttribute("tabindex", "-1");
        conflict.focus();
        announce("Not saved: the task changed meanwhile.", "error");
      } else if (error instanceof ApiError && error.errors.length) {
        showErrors(error.errors, { summarise: true });
        announce(`Not saved: ${error.errors.length} field${error.errors.length === 1 ? "" : "s"} to fix.`, "error");
      } else {
        summary.hidden = false;
        summary.setAttribute("aria-labelledby", "error-summary-title");
        fill(summary, h("h2", { id: "error-summary-title" }, "Not saved"), h("p", {}, describeError(error)));
        summary.focus();
        announce(`Not saved: ${describeError(error)}`, "error");
      }
    }
  });

  runPreview(false);
}
