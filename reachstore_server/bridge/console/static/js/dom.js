// Small helpers for building the page without innerHTML: every value is set as text, so
// nothing an API returns can become markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

let counter = 0;
export function uid(prefix) {
  counter += 1;
  return `${prefix}-${counter}`;
}

// A labelled form control: the label is always a real <label for>.
export function field(label, control, hint) {
  if (!control.id) control.id = uid("f");
  const parts = [h("label", { for: control.id }, label), control];
  if (hint) {
    const hintId = uid("hint");
    control.setAttribute("aria-describedby", hintId);
    parts.push(h("small", { id: hintId }, hint));
  }
  return h("div", { class: "field" }, parts);
}

export function select(name, options, value) {
  const el = h("select", { name });
  for (const [optValue, text] of options) {
    const opt = h("option", { value: optValue }, text);
    if (optValue === value) opt.selected = true;
    el.append(opt);
  }
  return el;
}

export function announce(text) {
  const region = document.getElementById("announce");
  if (!region) return;
  region.textContent = "";
  // A fresh text node makes screen readers read the message even when it repeats.
  window.setTimeout(() => { region.textContent = text; }, 30);
}

export function fmtTime(rfc3339) {
  if (!rfc3339) return "—";
  const d = new Date(rfc3339);
  if (Number.isNaN(d.getTime())) return rfc3339;
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function fmtAge(rfc3339, now = Date.now()) {
  if (!rfc3339) return "—";
  const seconds = Math.max(0, Math.round((now - new Date(rfc3339).getTime()) / 1000));
  if (seconds < 90) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 90) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h`;
  return `${Math.round(hours / 24)} d`;
}

export function fmtMs(ms) {
  if (!ms) return "0 ms";
  if (ms < 10) return `${Math.round(ms * 10) / 10} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120000) return `${Math.round(ms / 100) / 10} s`;
  return `${Math.round(ms / 60000)} min`;
}

export function pct(ratio) {
  return `${Math.round(ratio * 1000) / 10} %`;
}

export function short(id, n = 10) {
  return id && id.length > n ? `${id.slice(0, n)}…` : id || "—";
}
