// Audit: browse the trail with filters (ListEvents) and check it (Verify). A broken chain is
// shown with where it broke (tenant, position, event) and how (the kind of break).

import { api } from "./api.js";
import { h, clear, field, announce, fmtTime, short } from "./dom.js";
import { errorBox, emptyBox, loadingBox } from "./notices.js";

const FILTERS = [
  ["service", "Service", "query, ingest, admin or reach"],
  ["method", "Method or action event", "for example ResolveAction or action.succeeded"],
  ["caller_key_id", "Caller key id", ""],
  ["idempotency_key", "Idempotency key", ""],
  ["trace_id", "Trace id", ""],
  ["since", "Since (RFC 3339)", "for example 2026-12-01T00:00:00Z"],
  ["until", "Until (RFC 3339)", ""],
  ["tenant", "Tenant", "empty: your key's tenant; another needs the auditor scope"],
];

const BREAKS = {
  edited: "an event's content no longer matches its hash",
  deleted: "an event is missing",
  inserted: "an event was added between two others",
  reordered: "events are in another order than they were chained",
  truncated: "the chain ends before a signed checkpoint",
  forged_checkpoint: "a checkpoint's signature does not verify",
  rewritten: "the chain was rewritten, hashes included, and differs from a signed checkpoint",
  checkpoint_missing: "a witness holds a signed checkpoint the database no longer has",
  witness_incomplete: "the database holds a signed checkpoint a witness lacks (lines removed from its end)",
  witness_broken: "a witness's line is out of sequence, changed, or not signed with the audit key",
  cadence_gap: "events waited longer for a checkpoint than the checkpoint interval allows",
  unvouched_tail: "events stored by an audit process that stopped without signing them",
};

function age(seconds) {
  if (seconds === undefined || seconds === null) return "none yet";
  const s = Number(seconds);
  if (s < 120) return `${Math.round(s)} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

async function loadCheckpoint(section) {
  clear(section).append(loadingBox("the latest checkpoint"));
  try {
    const reply = await api.checkpoint("");
    const c = reply.checkpoint;
    clear(section).append(h("dl", { class: "facts", "data-checkpoint": "ages" },
      h("dt", {}, "Last checkpoint signed"), h("dd", { "data-age": "checkpoint" }, age(reply.last_checkpoint_age_s)),
      h("dt", {}, "Last head kept by every witness"), h("dd", { "data-age": "witnessed" }, age(reply.last_witnessed_age_s)),
      h("dt", {}, "Your tenant's latest checkpoint"),
      h("dd", {}, c ? `position ${c.seq}, ${fmtTime(c.signed_at)}, key ${c.key_id}` : "none yet")));
  } catch (err) {
    clear(section).append(errorBox(err, "the latest checkpoint", () => loadCheckpoint(section)));
  }
}

const state = { filters: {}, pages: [""] };

export function renderAudit(root) {
  clear(root);
  const heading = h("h1", { tabindex: "-1" }, "Audit");
  const verifySection = h("section", { class: "panel", "aria-labelledby": "verify-title" });
  const ages = h("div", {});
  const checkpointSection = h("section", { class: "panel", "aria-labelledby": "checkpoint-title" },
    h("h2", { id: "checkpoint-title" }, "Checkpoints"),
    h("p", { class: "lead" }, "Checkpoints are due every checkpoint interval while events arrive, " +
      "each also kept by the witnesses outside the database."),
    ages);
  const events = h("div", { class: "events" });
  const eventsSection = h("section", { class: "panel", "aria-labelledby": "events-title" },
    h("h2", { id: "events-title" }, "Browse events"),
    h("p", { class: "lead" }, "The trail in chain order, personal data masked before it was stored."),
    eventForm(events), events);
  root.append(heading, checkpointSection, verifySection, eventsSection);
  verifySection.append(verifyForm());
  loadCheckpoint(ages);
  loadEvents(events);
  return heading;
}

function verifyForm() {
  const tenant = h("input", { name: "tenant", type: "text", autocomplete: "off" });
  const from = h("input", { name: "from_seq", type: "number", min: 1, inputmode: "numeric" });
  const to = h("input", { name: "to_seq", type: "number", min: 1, inputmode: "numeric" });
  const result = h("div", { id: "verify-result", "aria-live": "polite" });
  const button = h("button", { type: "submit" }, "Verify the chain");
  const form = h("form", { class: "filters", "aria-labelledby": "verify-title" },
    field("Tenant", tenant, "empty: your key's tenant"),
    field("From position", from, "empty: the first event"),
    field("To position", to, "empty: the head"),
    h("div", { class: "actions" }, button));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    clear(result).append(loadingBox("the verification"));
    const body = {};
    if (tenant.value.trim()) body.tenant = tenant.value.trim();
    if (from.value) body.from_seq = Number(from.value);
    if (to.value) body.to_seq = Number(to.value);
    try {
      const reply = await api.verify(body);
      clear(result).append(verdict(reply));
      announce(reply.ok ? "The chain is intact" : "The chain is broken");
    } catch (err) {
      clear(result).append(errorBox(err, "the verification", () => form.requestSubmit()));
    } finally {
      button.disabled = false;
    }
  });
  return h("div", {},
    h("h2", { id: "verify-title" }, "Verify the trail"),
    h("p", { class: "lead" }, "Checks every event's hash, every link to the previous event " +
      "and every signed checkpoint. Edits, deletions, insertions, reordering and truncation " +
      "are all found."),
    form, result);
}

function verdict(reply) {
  const counts = `${reply.events_checked} events, ${reply.checkpoints_checked} checkpoints, ` +
    `${reply.tenants_checked} tenant(s) checked.`;
  if (reply.ok) {
    return h("div", { class: "notice ok", "data-verdict": "ok" },
      h("p", { class: "verdict" }, "Intact: the chain verifies."), h("p", {}, counts));
  }
  const b = reply.first_break || {};
  return h("div", { class: "notice error", "data-verdict": "broken", role: "alert" },
    h("p", { class: "verdict" }, `Broken: ${b.kind ? b.kind.replaceAll("_", " ") : "unknown kind"}`),
    h("dl", { class: "facts" },
      h("dt", {}, "Where"), h("dd", {}, `tenant ${b.tenant}, position ${b.seq}`),
      h("dt", {}, "Event"), h("dd", {}, b.event_id || "no event at that position"),
      h("dt", {}, "How"), h("dd", {}, BREAKS[b.kind] || "—"),
      h("dt", {}, "Detail"), h("dd", {}, b.detail || "—")),
    h("p", {}, counts));
}

function eventForm(events) {
  const controls = {};
  const fields = FILTERS.map(([name, label, hint]) => {
    controls[name] = h("input", { name, type: "text", autocomplete: "off" });
    return field(label, controls[name], hint);
  });
  const form = h("form", { class: "filters", "aria-label": "Filter audit events" },
    ...fields, h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filters")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.filters = Object.fromEntries(
      Object.entries(controls).map(([name, el]) => [name, el.value.trim()]));
    state.pages = [""];
    loadEvents(events);
  });
  return form;
}

async function loadEvents(section) {
  clear(section);
  section.append(loadingBox("audit events"));
  let reply;
  try {
    reply = await api.listEvents({
      ...state.filters, page_size: 50, page_token: state.pages[state.pages.length - 1],
    });
  } catch (err) {
    clear(section);
    section.append(errorBox(err, "audit events", () => loadEvents(section)));
    return;
  }
  clear(section);
  const events = reply.events || [];
  if (!events.length) {
    section.append(emptyBox(state.pages.length > 1 ? "No more events."
      : "No events match these filters."));
  } else {
    section.append(h("table", { class: "grid" },
      h("caption", { class: "visually-hidden" }, "Audit events in chain order"),
      h("thead", {}, h("tr", {}, ["#", "Time", "Service", "Method", "Result", "Caller", "Idempotency key", ""]
        .map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, events.flatMap(eventRows))));
  }
  const nav = h("div", { class: "pager" });
  if (state.pages.length > 1) {
    nav.append(h("button", { type: "button", onclick: () => { state.pages.pop(); loadEvents(section); } },
      "Previous page"));
  }
  if (reply.next_page_token) {
    nav.append(h("button", { type: "button", onclick: () => {
      state.pages.push(reply.next_page_token); loadEvents(section);
    } }, "Next page"));
  }
  nav.append(h("button", { type: "button", onclick: () => loadEvents(section) }, "Refresh"));
  section.append(nav);
}

function eventRows(e) {
  const detailRow = h("tr", { class: "event-detail", hidden: true },
    h("td", { colspan: 8 },
      h("dl", { class: "facts" },
        h("dt", {}, "Event id"), h("dd", {}, e.event_id),
        h("dt", {}, "Trace"), h("dd", {}, e.trace_id || "—"),
        h("dt", {}, "Took"), h("dd", {}, `${e.duration_ms} ms`),
        h("dt", {}, "Hash"), h("dd", { class: "mono" }, e.hash),
        h("dt", {}, "Previous hash"), h("dd", { class: "mono" }, e.prev_hash)),
      h("pre", { class: "json" }, JSON.stringify(e.params || {}, null, 2))));
  const toggle = h("button", { type: "button", class: "link", "aria-expanded": "false" }, "Details");
  toggle.addEventListener("click", () => {
    detailRow.hidden = !detailRow.hidden;
    toggle.setAttribute("aria-expanded", String(!detailRow.hidden));
  });
  const result = e.result_status === "ok" ? "ok" : `${e.result_status} ${e.error_code}`;
  return [h("tr", { "data-seq": e.seq },
    h("td", { class: "num" }, e.seq),
    h("td", {}, fmtTime(e.time)),
    h("td", {}, e.service),
    h("td", {}, e.method),
    h("td", { class: e.result_status === "ok" ? "" : "bad" }, result),
    h("td", {}, e.caller_key_id || "system"),
    h("td", { title: e.idempotency_key }, short(e.idempotency_key, 28)),
    h("td", {}, toggle)), detailRow];
}
