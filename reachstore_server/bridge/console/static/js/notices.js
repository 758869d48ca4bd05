// Honest empty and error states: never a silent blank panel. An error names the service
// that failed, what it said, and when it is worth trying again.

import { h, fmtMs } from "./dom.js";

const SERVICE_LABEL = {
  reach: "The reach service",
  audit: "The audit service",
  query: "The query service",
  ingest: "The ingest service",
  bridge: "The bridge",
};

function sentence(text) {
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

export function describeError(err) {
  const who = SERVICE_LABEL[err.service] || `The ${err.service || "server"}`;
  if (err.code === "SERVICE_UNAVAILABLE" || err.code === "BRIDGE_UNREACHABLE") {
    return `${who} is not answering right now.`;
  }
  if (err.code === "DEADLINE_EXCEEDED") return `${who} did not answer in time.`;
  if (err.isAuth) return `${who} refused the key: ${sentence(err.message)}`;
  return `${who} refused the request: ${sentence(err.message)}`;
}

export function retryAdvice(err) {
  if (!err.retryable && err.category !== "transient" && err.category !== "timeout") {
    return err.isAuth
      ? "Retrying will not help: sign in with a key that has the needed scope."
      : "Retrying as is will not help.";
  }
  const wait = err.retryAfterMs ? fmtMs(err.retryAfterMs) : "a few seconds";
  return `Try again in ${wait}.`;
}

// An error panel with a retry button (when retrying can help).
export function errorBox(err, what, retry) {
  const parts = [
    h("p", { class: "error-title" }, `Could not load ${what}. ${describeError(err)}`),
    h(
      "p",
      {},
      retryAdvice(err),
      " ",
      h("span", { class: "code" }, `${err.code}${err.category ? ` · ${err.category}` : ""}`),
      err.status ? ` · HTTP ${err.status}` : "",
    ),
  ];
  if (retry) parts.push(h("button", { type: "button", onclick: retry }, `Retry ${what}`));
  return h("div", { class: "notice error", role: "alert" }, parts);
}

export function emptyBox(text) {
  return h("p", { class: "notice empty" }, text);
}

export function loadingBox(what) {
  return h("p", { class: "notice loading", role: "status" }, `Loading ${what}…`);
}
