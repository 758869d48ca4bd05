// The weekly UNKNOWN review (GetUnknownReview): every action that went through UNKNOWN in
// the period, by channel and by how it was settled — by the receiver's look-up, by a
// person, by a cancel, or still open. Read once a week; docs/CONSOLE.md says what to look
// for. Open actions link to the review queue, where they are resolved.

import { api } from "./api.js";
import { h, clear, field, select, fmtTime } from "./dom.js";
import { errorBox, emptyBox, loadingBox } from "./notices.js";

const PERIODS = [
  ["86400", "last day"],
  ["604800", "last 7 days"],
  ["1209600", "last 14 days"],
  ["2592000", "last 30 days"],
];

const SETTLED = {
  lookup: "settled by the receiver's look-up",
  operator: "settled by a person",
  cancelled: "cancelled",
  open: "still open",
};

let sinceS = "604800";

export function renderUnknowns(root) {
  clear(root);
  const heading = h("h1", { tabindex: "-1" }, "UNKNOWN review");
  const intro = h("p", { class: "lead" },
    "Every action whose outcome was unknown at some point in the period, by channel and by " +
      "how it was settled. A channel with many settled by a person wants a status look-up; " +
      "many still open want a person now.");
  const list = h("section", { class: "panel", "aria-labelledby": "unknowns-title" });
  const periodSelect = select("since_s", PERIODS, sinceS);
  const form = h("form", { class: "filters", "aria-label": "Review period" },
    field("Period", periodSelect),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Refresh")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sinceS = periodSelect.value;
    load(list);
  });
  root.append(heading, intro, form, list);
  load(list);
  return heading;
}

async function load(section) {
  clear(section);
  const title = h("h2", { id: "unknowns-title" }, "Actions that went through UNKNOWN");
  section.append(title, loadingBox("the UNKNOWN review"));
  let reply;
  try {
    reply = await api.unknownReview({ since_s: sinceS });
  } catch (err) {
    clear(section);
    section.append(title, errorBox(err, "the UNKNOWN review", () => load(section)));
    return;
  }
  clear(section);
  const groups = reply.groups || [];
  section.append(title, h("p", { class: "note", "data-total": String(reply.total || 0) },
    `${reply.total || 0} action(s) since ${fmtTime(reply.since)} (times in UTC).`));
  if (!groups.length) {
    section.append(emptyBox("No action went through UNKNOWN in this period."));
    return;
  }
  const rows = groups.map((g) => h("tr",
    { "data-channel": g.channel, "data-settled-by": g.settled_by, "data-state": g.state,
      class: g.settled_by === "open" ? "partial" : "" },
    h("th", { scope: "row" }, g.channel),
    h("td", {}, SETTLED[g.settled_by] || g.settled_by),
    h("td", {}, g.state.replace("_", " ")),
    h("td", { class: "num" }, String(g.count)),
    h("td", {}, (g.actions || []).map(entryLine))));
  section.append(h("table", { class: "grid unknowns" },
    h("caption", { class: "visually-hidden" }, "UNKNOWN actions by channel and settlement"),
    h("thead", {}, h("tr", {},
      ["Channel", "How settled", "Now", "Actions", "Which"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}

// One action of a group; an open one links to the review queue, where it is resolved.
function entryLine(a) {
  return h("div", { "data-action": a.action_id },
    a.settled_at || a.resolved_by ? a.action_id : h("a", { href: "#/queue" }, a.action_id),
    ` ${a.name}, unknown ${fmtTime(a.entered_unknown_at)}`,
    a.settled_at ? `, settled ${fmtTime(a.settled_at)}` : "",
    a.resolved_by ? ` by ${a.resolved_by}: ${a.note}` : "");
}
