// Building the page from data. Every string a tenant wrote (a name, a tag, an
// error, a handler's answer) reaches the page as a text node or an attribute
// value, never as markup: nothing here parses a string as HTML.

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * An element: h("a", {href: "/console", class: "nav"}, "Tasks", child, [more]).
 * Attributes are set with setAttribute; `on: {click: fn}` adds listeners; any
 * child that is not a Node becomes a text node; null, undefined and false are skipped.
 */
export function h(tag, attributes = {}, ...children) {
  return build(document.createElement(tag), attributes, children);
}

/** An SVG element, as h() builds HTML ones. */
export function svg(tag, attributes = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attributes, children);
}

function build(element, attributes, children) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "on") {
      for (const [event, listener] of Object.entries(value)) element.addEventListener(event, listener);
    } else if (name.toLowerCase().startsWith("on")) {
      throw new Error(`refusing the inline handler attribute ${name}`);
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace what `element` holds with `children`. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A badge for a task or execution status: the word itself, coloured by a class. */
export function statusBadge(status) {
  const word = status || "—";
  return h("span", { class: `badge badge-${String(word).toLowerCase().replace(/[^a-z_]/g, "")}` }, word);
}

/** Announce a message to screen readers (and show it) in the page's live region. */
export function announce(message, kind = "info") {
  const region = document.getElementById("status");
  if (!region) return;
  region.dataset.kind = kind;
  // Cleared first, so the same message twice is announced twice.
  region.textContent = "";
  window.clearTimeout(announce.timer);
  window.setTimeout(() => {
    region.textContent = message;
    // Shown for a while, then the toast goes; the message was announced already.
    announce.timer = window.setTimeout(() => {
      if (region.textContent === message) region.textContent = "";
    }, 10000);
  }, 30);
}

/** A link to a page of the console, handled by the router without a reload. */
export function link(path, ...children) {
  return h("a", { href: path, "data-route": "" }, ...children);
}

/** A labelled control: <div class="field"><label for=id>text</label>control hint</div>. */
export function field(label, control, hint) {
  const id = control.id;
  const parts = [h("label", { for: id }, label), control];
  if (hint) {
    const hintId = `${id}-hint`;
    parts.push(h("p", { class: "hint", id: hintId }, hint));
    describedBy(control, hintId);
  }
  return h("div", { class: "field" }, parts);
}

/** Add `id` to the control's aria-describedby list. */
export function describedBy(control, id) {
  const ids = new Set((control.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean));
  ids.add(id);
  control.setAttribute("aria-describedby", [...ids].join(" "));
}

export function undescribedBy(control, id) {
  const ids = (control.getAttribute("aria-describedby") || "").split(/\s+/).filter((x) => x && x !== id);
  if (ids.length) control.setAttribute("aria-describedby", ids.join(" "));
  else control.removeAttribute("aria-describedby");
}

/** A <select> from [value, label] pairs. */
export function select(id, options, value) {
  const element = h("select", { id, name: id });
  for (const [optionValue, label] of options) {
    element.append(h("option", { value: optionValue, selected: optionValue === value }, label));
  }
  return element;
}

/** Text cut to `length` characters, with an ellipsis. */
export function excerpt(text, length = 120) {
  if (text === null || text === undefined) return "";
  const value = String(text);
  return value.length > length ? `${value.slice(0, length - 1)}…` : value;
}
