// Modal dialogs (<dialog> with showModal: the browser traps focus, Escape
// cancels, and focus returns to where it was when the dialog closes).

import { field, h } from "./dom.js";

let dialogCount = 0;

/**
 * Open a dialog and wait for the answer: the form's values (an object) when
 * confirmed, null when cancelled. `fields` are controls (each with an id);
 * `validate(values)` may return a message to show instead of closing.
 */
export function openDialog({ title, message, fields = [], confirmLabel, danger = false, validate }) {
  dialogCount += 1;
  const titleId = `dialog-title-${dialogCount}`;
  const messageId = `dialog-message-${dialogCount}`;
  const errorId = `dialog-error-${dialogCount}`;
  const opener = document.activeElement;
  const error = h("p", { class: "field-error", id: errorId, role: "alert", hidden: true });
  const confirm = h(
    "button",
    { type: "submit", class: danger ? "button danger" : "button primary" },
    confirmLabel,
  );
  const cancel = h("button", { type: "button", class: "button" }, "Cancel");
  const form = h(
    "form",
    { class: "dialog-form", novalidate: true },
    h("h2", { id: titleId }, title),
    message ? h("p", { id: messageId }, message) : null,
    fields,
    error,
    h("div", { class: "dialog-actions" }, cancel, confirm),
  );
  const dialog = h(
    "dialog",
    {
      class: "dialog",
      "aria-labelledby": titleId,
      "aria-describedby": message ? messageId : null,
    },
    form,
  );
  document.body.append(dialog);

  return new Promise((resolve) => {
    let answer = null;
    const close = (value) => {
      answer = value;
      dialog.close();
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = {};
      for (const control of form.querySelectorAll("input, select, textarea")) {
        values[control.name || control.id] = control.value;
      }
      const problem = validate ? validate(values) : null;
      if (problem) {
        error.textContent = problem;
        error.hidden = false;
        return;
      }
      close(values);
    });
    cancel.addEventListener("click", () => close(null));
    dialog.addEventListener("close", () => {
      dialog.remove();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(answer);
    });
    dialog.showModal();
    // The first field, else the safe choice: Cancel, never the destructive button.
    const first = form.querySelector("input, select, textarea");
    (first || cancel).focus();
  });
}

/** Ask to confirm an action; resolves to true or false. */
export async function confirmAction({ title, message, confirmLabel, danger = true }) {
  return (await openDialog({ title, message, confirmLabel, danger })) !== null;
}

/** Ask for an API key; resolves to the key or null. */
export async function askForApiKey(refused, detail) {
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
  });
  const values = await openDialog({
    title: "API key needed",
    message: refused
      ? `The API refused the key${detail ? ` (${detail})` : ""}. Enter another one.`
      : "This dynacron asks for an API key. It is kept in this browser tab only, " +
        "until the tab is closed.",
    fields: [field("API key", input)],
    confirmLabel: "Use this key",
    danger: false,
    validate: (v) => (v["api-key"].trim() ? null : "Enter the key, or cancel."),
  });
  return values ? values["api-key"].trim() : null;
}
