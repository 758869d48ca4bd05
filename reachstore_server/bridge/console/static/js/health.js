// Health: per channel, the three signals over time (GetChannelHealth: state changes,
// latency p50/p95/p99, retry rate — from the database) with the breaker state and limiter
// waits of the reach replica that answered; per namespace, document counts, index state
// and recent query coverage (ListNamespaceHealth, counted by the query replica that
// answered). Each half loads on its own, so one service being down hides nothing else.
// Each channel also shows its alert thresholds: the last hour's failure rate, UNKNOWN rate
// and latency p99 against the same hour of the day over the last days
// (reachstore_server/reach/baseline.py).

import { api } from "./api.js";
import { h, clear, field, select, fmtMs, pct, fmtTime } from "./dom.js";
import { errorBox, emptyBox, loadingBox } from "./notices.js";
import { stackedBars, lines, ratioBars, legend } from "./charts.js";

const WINDOWS = [
  ["900", "last 15 minutes"],
  ["3600", "last hour"],
  ["21600", "last 6 hours"],
  ["86400", "last day"],
];

const STATES = [
  { name: "succeeded", cls: "s-succeeded" },
  { name: "failed", cls: "s-failed" },
  { name: "unknown", cls: "s-unknown" },
  { name: "needs_review", cls: "s-review" },
  { name: "pending", cls: "s-pending" },
  { name: "submitting", cls: "s-submitting" },
  { name: "ready", cls: "s-ready" },
  { name: "cancelled", cls: "s-cancelled" },
  { name: "skipped", cls: "s-skipped" },
  { name: "blocked", cls: "s-blocked" },
];

const LATENCY = [
  { name: "p50", cls: "l-p50", key: "latency_p50_ms" },
  { name: "p95", cls: "l-p95", key: "latency_p95_ms" },
  { name: "p99", cls: "l-p99", key: "latency_p99_ms" },
];

let windowS = "3600";

export function renderHealth(root) {
  clear(root);
  const heading = h("h1", { tabindex: "-1" }, "Health");
  const channels = h("section", { class: "panel", "aria-labelledby": "channels-title" });
  const namespaces = h("section", { class: "panel", "aria-labelledby": "namespaces-title" });
  const windowSelect = select("window_s", WINDOWS, windowS);
  const form = h("form", { class: "filters", "aria-label": "Health window" },
    field("Window", windowSelect),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Refresh")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    windowS = windowSelect.value;
    loadChannels(channels);
    loadNamespaces(namespaces);
  });
  root.append(heading, form, channels, namespaces);
  loadChannels(channels);
  loadNamespaces(namespaces);
  return heading;
}

function timeLabel(rfc3339) {
  const d = new Date(rfc3339);
  return d.toISOString().slice(11, 16);
}

async function loadChannels(section) {
  clear(section);
  const title = h("h2", { id: "channels-title" }, "Reach channels");
  section.append(title, loadingBox("channel health"));
  let reply;
  try {
    reply = await api.channelHealth({ window_s: windowS });
  } catch (err) {
    clear(section);
    section.append(title, errorBox(err, "channel health", () => loadChannels(section)));
    return;
  }
  clear(section);
  section.append(title, h("p", { class: "note" },
    `Counts, latencies and retries come from the database for your tenant, in buckets of ` +
    `${reply.bucket_s} s (times in UTC). Breaker and limiter figures are those of reach replica ` +
    `${reply.replica} (each replica keeps its own). Computed ${fmtTime(reply.generated_at)}.`));
  const channels = reply.channels || [];
  if (!channels.length) {
    section.append(emptyBox("No channels are configured for this key, so there is nothing to watch."));
    return;
  }
  for (const channel of channels) section.append(channelCard(channel));
}

function channelCard(channel) {
  const buckets = channel.buckets || [];
  const xLabels = buckets.map((b) => timeLabel(b.start));
  const current = channel.current || [];
  const total = current.reduce((sum, c) => sum + Number(c.count), 0);
  const rows = buckets.map((b) => ({
    label: timeLabel(b.start),
    values: Object.fromEntries((b.entered || []).map((e) => [e.state, Number(e.count)])),
  }));
  const changes = rows.reduce((sum, r) => sum + Object.values(r.values).reduce((a, b) => a + b, 0), 0);
  const finished = buckets.reduce((sum, b) => sum + Number(b.finished), 0);
  const sends = buckets.reduce((sum, b) => sum + Number(b.sends), 0);
  const retries = buckets.reduce((sum, b) => sum + Number(b.retries), 0);
  const worstP99 = Math.max(0, ...buckets.map((b) => b.latency_p99_ms));
  let limiter = "no declared quota (no limiter)";
  if (channel.limiter) {
    limiter = Number(channel.limiter.sends)
      ? `limiter: ${channel.limiter.sends} sends waited ${fmtMs(channel.limiter.mean_wait_ms)} on average`
      : "limiter: no sends through it on this replica yet";
  }
  const usedStates = STATES.filter((s) => rows.some((r) => r.values[s.name]));
  return h("article", { class: "card", "data-channel": channel.channel },
    h("header", {},
      h("h3", {}, channel.channel),
      h("span", { class: `badge breaker-${channel.breaker_state}` }, `breaker ${channel.breaker_state.replace("_", "-")}`),
      h("span", { class: "muted" }, limiter)),
    h("p", { class: "now" }, total
      ? `Now: ${current.map((c) => `${c.count} ${c.state.replace("_", " ")}`).join(", ")}`
      : "Now: no actions on this channel yet."),
    h("div", { class: "charts" },
      h("figure", {},
        stackedBars("State changes per bucket", STATES, rows,
          `${changes} state changes in the window`),
        h("figcaption", {}, "Actions entering each state"),
        usedStates.length ? legend(usedStates) : h("p", { class: "muted" }, "no state changes in the window")),
      h("figure", {},
        lines("End-to-end latency",
          LATENCY.map((l) => ({ ...l, values: buckets.map((b) => (Number(b.finished) ? b[l.key] : null)) })),
          xLabels, fmtMs, finished
            ? `${finished} actions finished; worst p99 ${fmtMs(worstP99)}`
            : "no action finished in the window"),
        h("figcaption", {}, `Latency, reservation to final state (${finished} finished)`),
        finished ? legend(LATENCY) : h("p", { class: "muted" }, "no action finished in the window")),
      h("figure", {},
        lines("Retry rate",
          [{ name: "retries per send", cls: "l-retry",
            values: buckets.map((b) => (Number(b.sends) ? b.retry_rate : null)) }],
          xLabels, (v) => pct(v), sends ? `${retries} retries for ${sends} sends` : "nothing sent in the window"),
        h("figcaption", {}, `Retry rate (${retries} retries / ${sends} sends)`),
        sends ? null : h("p", { class: "muted" }, "nothing sent in the window"))),
    baselineTable(channel));
}

const SIGNALS = {
  technical_failure_rate: ["Technical failure rate", pct],
  business_failure_rate: ["Business failure rate", pct],
  unknown_rate: ["UNKNOWN rate", pct],
  latency_p99_ms: ["Latency p99", fmtMs],
};

// The thresholds alerts are raised at, and where each signal stands against them.
function baselineTable(channel) {
  const rows = channel.baselines || [];
  if (!rows.length) return null;
  return h("table", { class: "grid baselines", "data-baselines": channel.channel },
    h("caption", {}, "Alert thresholds: the last hour against the same hour of the day " +
      "over the last days (mean + 3 standard deviations)"),
    h("thead", {}, h("tr", {},
      ["Signal", "Last hour", "Samples", "Usual (median)", "Deviation", "Threshold", "Days", "Status"]
        .map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.map((b) => {
      const [label, fmt] = SIGNALS[b.signal] || [b.signal, (v) => String(v)];
      const status = b.alerting
        ? `alerting (${b.failure_kind})`
        : b.not_judged_reason ? `not judged: ${b.not_judged_reason}` : "within";
      return h("tr", { "data-signal": b.signal, class: b.alerting ? "partial" : "" },
        h("th", { scope: "row" }, label),
        h("td", { class: "num" }, fmt(b.current || 0)),
        h("td", { class: "num" }, String(b.samples || 0)),
        h("td", { class: "num" }, fmt(b.mean || 0)),
        h("td", { class: "num" }, fmt(b.stddev || 0)),
        h("td", { class: "num threshold" }, fmt(b.threshold || 0)),
        h("td", { class: "num" }, String(b.history_days || 0)),
        h("td", { class: "status" }, status));
    })));
}

async function loadNamespaces(section) {
  clear(section);
  const title = h("h2", { id: "namespaces-title" }, "Namespaces");
  section.append(title, loadingBox("namespace health"));
  const all = [];
  let reply;
  try {
    let token = "";
    // At most 5 pages of 100: beyond that the page says how many were left out.
    for (let page = 0; page < 5; page += 1) {
      reply = await api.namespaceHealth({ window_s: windowS, page_size: 100, page_token: token });
      all.push(...(reply.namespaces || []));
      token = reply.next_page_token;
      if (!token) break;
    }
  } catch (err) {
    clear(section);
    section.append(title, errorBox(err, "namespace health", () => loadNamespaces(section)));
    return;
  }
  clear(section);
  section.append(title, h("p", { class: "note" },
    `Documents come from the database. Index state and coverage are those of query replica ` +
    `${reply.replica}: it counts the answers it gave in the window (each replica counts its own).`));
  if (!all.length) {
    section.append(emptyBox("This tenant has no namespaces yet."));
    return;
  }
  const queried = all.filter((n) => Number(n.queries) > 0);
  if (queried.length) {
    section.append(h("figure", {},
      ratioBars("Query coverage per namespace",
        queried.map((n) => ({ label: n.name, value: n.coverage_ratio,
          text: `${pct(n.coverage_ratio)}` })),
        `${queried.filter((n) => n.coverage_ratio < 1).length} of ${queried.length} queried namespaces were missing from some answers`),
      h("figcaption", {}, "Share of answers each namespace was part of")));
  } else {
    section.append(emptyBox("No namespace was queried on this replica in the window."));
  }
  section.append(h("table", { class: "grid" },
    h("caption", { class: "visually-hidden" }, "Namespaces and their coverage"),
    h("thead", {}, h("tr", {},
      ["Namespace", "Documents", "Chunks", "Index", "Held by", "Answers", "Missing", "Coverage", "Why missing", "Last missing"]
        .map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, all.map((n) => h("tr", { "data-namespace": n.name, class: n.missing > 0 ? "partial" : "" },
      h("th", { scope: "row" }, n.name),
      h("td", { class: "num" }, n.document_count),
      h("td", { class: "num" }, n.chunk_count),
      h("td", {}, n.index_state.replace("_", " ")),
      // Sharded query tier (docs/SHARDS.md): who answers for it, and who it is moving to.
      h("td", { class: "owners" }, [
        (n.owners || []).join(", ") || "every replica",
        ...(n.warming_owners || []).map((m) => h("div", { class: "moving" }, `moving to ${m}`))]),
      h("td", { class: "num" }, n.queries),
      h("td", { class: "num" }, n.missing),
      h("td", { class: "num" }, Number(n.queries) ? pct(n.coverage_ratio) : "not queried"),
      h("td", {}, (n.missing_by || []).length
        ? (n.missing_by || []).map((m) => h("div", {}, `${m.category}: ${m.error_code} × ${m.count}`))
        : "—"),
      h("td", {}, fmtTime(n.last_missing_at)))))));
}
