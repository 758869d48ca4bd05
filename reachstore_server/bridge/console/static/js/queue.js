// The review queue: UNKNOWN and NEEDS_REVIEW actions (ListActions), one action's receipts
// and history (GetAction), and what an operator does with it: resolve it with a note
// (ResolveAction) or look it up at the receiver now (RecheckAction).

import { api } from "./api.js";
import { h, clear, field, select, announce, fmtAge, fmtTime, short, fmtMs } from "./dom.js";
import { errorBox, emptyBox, loadingBox, describeError, retryAdvice } from "./notices.js";

const AGES = [
  ["", "any age"],
  ["300", "older than 5 minutes"],
  ["3600", "older than 1 hour"],
  ["86400", "older than 1 day"],
  ["604800", "older than 1 week"],
];

const state = {
  filters: { states: ["unknown", "needs_review"], channel: "", tenant: "", min_age_s: "" },
  pages: [""],
  selected: null,
  ownTenant: "", // the key's tenant, as ListActions reports it
};

export function renderQueue(root) {
  clear(root);
  const heading = h("h1", { tabindex: "-1" }, "Review queue");
  const intro = h(
    "p",
    { class: "lead" },
    "Actions whose outcome is unknown or that wait for a person. Check the receiver, then " +
      "resolve each one as succeeded or failed with a note, or ask reach to look it up again now.",
  );
  const list = h("section", { class: "panel", "aria-labelledby": "queue-list-title" });
  const detail = h("section", { class: "panel detail", id: "action-detail", "aria-live": "polite" });
  root.append(heading, intro, filterForm(list, detail), h("div", { class: "split" }, list, detail));
  detail.append(emptyBox("Choose an action in the list to see its receipts and history."));
  refreshList = () => loadList(list, detail);
  loadList(list, detail);
  return heading;
}

function filterForm(list, detail) {
  const states = h("fieldset", { class: "inline" },
    h("legend", {}, "States"),
    ...[["unknown", "Unknown"], ["needs_review", "Needs review"]].map(([value, text]) => {
      const box = h("input", { type: "checkbox", name: "states", value, id: `state-${value}` });
      box.checked = state.filters.states.includes(value);
      return h("span", { class: "check" }, box, h("label", { for: box.id }, text));
    }),
  );
  const channel = h("input", { name: "channel", type: "text", value: state.filters.channel,
    list: "channel-names", autocomplete: "off" });
  const datalist = h("datalist", { id: "channel-names" });
  api.listChannels().then((reply) => {
    for (const c of reply.channels || []) datalist.append(h("option", { value: c.name }));
  }).catch(() => {});
  const age = select("min_age_s", AGES, state.filters.min_age_s);
  const tenant = h("input", { name: "tenant", type: "text", value: state.filters.tenant,
    autocomplete: "off" });
  const form = h("form", { class: "filters", "aria-label": "Filter the review queue" },
    states,
    field("Channel", channel, "empty: every channel"),
    datalist,
    field("Age", age),
    field("Tenant", tenant, "empty: your key's tenant; another needs the auditor scope"),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply filters")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.filters = {
      states: [...form.querySelectorAll("input[name=states]:checked")].map((b) => b.value),
      channel: channel.value.trim(),
      tenant: tenant.value.trim(),
      min_age_s: age.value,
    };
    state.pages = [""];
    loadList(list, detail);
  });
  return form;
}

async function loadList(list, detail) {
  clear(list);
  list.append(h("h2", { id: "queue-list-title" }, "Actions"), loadingBox("the review queue"));
  const token = state.pages[state.pages.length - 1];
  let reply;
  try {
    reply = await api.listActions({
      states: state.filters.states.length ? state.filters.states : ["unknown", "needs_review"],
      channel: state.filters.channel,
      tenant: state.filters.tenant,
      min_age_s: state.filters.min_age_s,
      page_size: 20,
      page_token: token,
    });
  } catch (err) {
    clear(list);
    list.append(h("h2", { id: "queue-list-title" }, "Actions"),
      errorBox(err, "the review queue", () => loadList(list, detail)));
    return;
  }
  clear(list);
  if (!state.filters.tenant) state.ownTenant = reply.tenant;
  const actions = reply.actions || [];
  list.append(h("h2", { id: "queue-list-title" },
    `Actions (${actions.length}${reply.next_page_token ? "+" : ""}) · tenant ${reply.tenant}`));
  if (!actions.length) {
    list.append(emptyBox(state.pages.length > 1
      ? "No more actions on this page."
      : "Nothing waits for review with these filters."));
  } else {
    const body = h("tbody");
    for (const action of actions) body.append(actionRow(action, detail));
    list.append(h("table", { class: "grid" },
      h("caption", { class: "visually-hidden" }, "Actions waiting for review, oldest first"),
      h("thead", {}, h("tr", {},
        ["Action", "State", "Channel", "Type", "Age", "Attempts", "Look-ups"]
          .map((t) => h("th", { scope: "col" }, t)))),
      body));
  }
  const nav = h("div", { class: "pager" });
  if (state.pages.length > 1) {
    nav.append(h("button", { type: "button", onclick: () => { state.pages.pop(); loadList(list, detail); } },
      "Previous page"));
  }
  if (reply.next_page_token) {
    nav.append(h("button", { type: "button", onclick: () => {
      state.pages.push(reply.next_page_token); loadList(list, detail);
    } }, "Next page"));
  }
  nav.append(h("button", { type: "button", onclick: () => loadList(list, detail) }, "Refresh"));
  list.append(nav);
}

function actionRow(action, detail) {
  const open = h("button", {
    type: "button", class: "link", "data-action-id": action.action_id,
    "aria-controls": "action-detail",
    onclick: () => showAction(action, detail),
  }, `${action.name} · ${short(action.action_id, 12)}`);
  return h("tr", { "data-state": action.state },
    h("td", {}, open),
    h("td", {}, h("span", { class: `badge ${action.state}` }, label(action.state))),
    h("td", {}, action.channel),
    h("td", {}, action.action_type),
    h("td", { title: fmtTime(action.created_at) }, fmtAge(action.created_at)),
    h("td", { class: "num" }, action.attempts),
    h("td", { class: "num" }, action.polls));
}

function label(s) {
  return (s || "").replace(/_/g, " ");
}

// Called after an action changed, to show it again and refresh the list next to it.
let refreshList = () => {};

async function showAction(listed, detail, after) {
  state.selected = listed.action_id;
  clear(detail);
  if (state.filters.tenant && state.filters.tenant !== state.ownTenant) {
    // Reads and resolutions are scoped to the key's tenant: another tenant's action is
    // shown from the list only, and settled with a key of that tenant.
    detail.append(h("h2", { tabindex: "-1" }, `Action ${listed.name}`),
      h("dl", { class: "facts" },
        fact("Action id", listed.action_id), fact("Task", listed.task_id),
        fact("State", label(listed.state)), fact("Idempotency key", listed.idempotency_key)),
      h("pre", { class: "json" }, JSON.stringify(listed.params || {}, null, 2)),
      emptyBox(`This action belongs to tenant ${state.filters.tenant}: its receipts, history ` +
        "and resolution need a key of that tenant."));
    detail.querySelector("h2").focus();
    return;
  }
  detail.append(loadingBox(`action ${short(listed.action_id, 12)}`));
  let full;
  try {
    full = (await api.getAction(listed.action_id)).action;
  } catch (err) {
    clear(detail);
    detail.append(errorBox(err, "the action", () => showAction(listed, detail)));
    return;
  }
  clear(detail);
  const heading = h("h2", { tabindex: "-1", id: "detail-title" }, `Action ${listed.name}`);
  detail.append(heading);
  detail.append(h("dl", { class: "facts" },
    fact("Action id", listed.action_id),
    fact("Task", listed.task_id),
    fact("State", label(full.state)),
    fact("Channel", `${full.channel} (${full.action_type})`),
    fact("Idempotency key", full.idempotency_key),
    fact("Reserved", `${fmtTime(full.created_at)} (${fmtAge(full.created_at)} ago)`),
    fact("Attempts / look-ups", `${full.attempts} / ${full.polls}`),
    fact("Next look-up", full.next_attempt_at ? fmtTime(full.next_attempt_at) : "none scheduled"),
    full.failure && full.failure.error_code
      ? fact("Why", `${full.failure.error_code} (${full.failure.category}): ${full.failure.message}`)
      : null,
    full.resolution && full.resolution.outcome
      ? fact("Resolved", `${full.resolution.outcome} by ${full.resolution.resolved_by || "the local operator"} ` +
          `at ${fmtTime(full.resolution.resolved_at)}: ${full.resolution.note}`)
      : null,
  ));
  detail.append(h("h3", {}, "Parameters (personal data masked)"),
    h("pre", { class: "json" }, JSON.stringify(listed.params || {}, null, 2)));
  detail.append(h("h3", {}, "History"), historyTable(full.history || []));
  detail.append(h("h3", {}, "Receipts"), receiptTable(full.receipts || []));
  const outcome = h("div", { class: "outcome", role: "status", "aria-live": "polite" });
  if (full.state === "unknown" || full.state === "needs_review") {
    detail.append(resolveForm(full, listed, detail, outcome), recheckBox(full, listed, detail, outcome));
  } else {
    const ended = ["succeeded", "failed", "cancelled", "skipped"].includes(full.state);
    detail.append(emptyBox(ended
      ? `This action ended as ${label(full.state)}: nothing left to resolve.`
      : `This action is ${label(full.state)}: only unknown and needs-review actions are resolved here.`));
  }
  detail.append(outcome);
  if (after) after(outcome);
  else heading.focus();
}

function fact(name, value) {
  return [h("dt", {}, name), h("dd", {}, value ?? "—")];
}

function historyTable(history) {
  if (!history.length) return emptyBox("No state changes recorded.");
  return h("table", { class: "grid compact" },
    h("thead", {}, h("tr", {}, ["When", "From", "To", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, history.map((e) => h("tr", {},
      h("td", {}, fmtTime(e.at)),
      h("td", {}, e.from_state === "unspecified" ? "(reserved)" : label(e.from_state)),
      h("td", {}, label(e.to_state)),
      h("td", {}, e.reason)))));
}

function receiptTable(receipts) {
  if (!receipts.length) return emptyBox("No receipts: the receiver never answered a call.");
  return h("table", { class: "grid compact" },
    h("thead", {}, h("tr", {}, ["Attempt", "Call", "Outcome", "Status", "Took", "Answer (masked)"]
      .map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, receipts.map((r) => h("tr", {},
      h("td", { class: "num" }, r.attempt), h("td", {}, r.operation), h("td", {}, r.outcome),
      h("td", { class: "num" }, r.status_code || "no answer"), h("td", { class: "num" }, fmtMs(r.duration_ms)),
      h("td", { class: "snippet" }, r.snippet || "—")))));
}

function resolveForm(action, listed, detail, outcome) {
  const succeeded = h("input", { type: "radio", name: "outcome", value: "RESOLUTION_SUCCEEDED", id: "outcome-ok", required: true });
  const failed = h("input", { type: "radio", name: "outcome", value: "RESOLUTION_FAILED", id: "outcome-failed" });
  const note = h("textarea", { name: "note", rows: 3, maxlength: 2000, required: true });
  const submit = h("button", { type: "submit" }, "Resolve action");
  const form = h("form", { class: "resolve", "aria-labelledby": "resolve-title" },
    h("h3", { id: "resolve-title" }, "Resolve"),
    h("fieldset", { class: "inline" }, h("legend", {}, "What happened at the receiver"),
      h("span", { class: "check" }, succeeded, h("label", { for: "outcome-ok" }, "It took effect (succeeded)")),
      h("span", { class: "check" }, failed, h("label", { for: "outcome-failed" }, "It did not take effect (failed)"))),
    field("Note: what you checked", note, "required, up to 2,000 characters; stored in the audit trail"),
    h("div", { class: "actions" }, submit));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = form.querySelector("input[name=outcome]:checked");
    if (!chosen || !note.value.trim()) {
      outcome.textContent = "Choose what happened and write what you checked.";
      return;
    }
    submit.disabled = true;
    outcome.textContent = "Resolving…";
    try {
      const reply = await api.resolveAction(action.action_id, chosen.value, note.value.trim());
      const done = reply.action;
      announce(`Action resolved as ${label(done.state)}`);
      refreshList();
      showAction(listed, detail, (box) => {
        box.append(h("p", { tabindex: "-1", class: "resolved-note" },
          `Resolved: the action is now ${label(done.state)}.`));
        box.firstChild.focus();
        followTask(done.task_id, box);
      });
    } catch (err) {
      submit.disabled = false;
      outcome.textContent = `${describeError(err)} ${retryAdvice(err)} (${err.code})`;
    }
  });
  return form;
}

async function followTask(taskId, outcome) {
  const line = h("p", { class: "task-state", "data-task-id": taskId }, `Waiting for task ${taskId}…`);
  outcome.append(line);
  for (let i = 0; i < 6; i += 1) {
    try {
      const reply = await api.getTask(taskId, i ? 5000 : 0);
      const task = reply.task;
      line.textContent = `Task ${taskId}: ${task.state}`;
      line.dataset.taskState = task.state;
      if (task.state === "succeeded" || task.state === "failed") {
        announce(`Task ${task.state}`);
        return;
      }
    } catch (err) {
      line.textContent = `Could not follow task ${taskId}. ${describeError(err)} ${retryAdvice(err)}`;
      return;
    }
  }
}

function recheckBox(action, listed, detail, outcome) {
  const button = h("button", { type: "button" }, "Look it up at the receiver now");
  button.addEventListener("click", async () => {
    button.disabled = true;
    outcome.textContent = "Asking reach to look the action up now…";
    try {
      const reply = await api.recheckAction(action.action_id);
      if (reply.scheduled) {
        outcome.textContent = "Look-up scheduled. Reloading the action in a moment…";
        window.setTimeout(() => {
          refreshList();
          showAction(listed, detail);
        }, 1500);
      } else {
        const why = (reply.partial_failures || [])[0];
        outcome.textContent = why ? `${why.message} (${why.error_code})` : "Not scheduled.";
        button.disabled = false;
      }
    } catch (err) {
      button.disabled = false;
      outcome.textContent = `${describeError(err)} ${retryAdvice(err)} (${err.code})`;
    }
  });
  return h("div", { class: "recheck" },
    h("h3", {}, "Look up again"),
    h("p", {}, "Reach asks the receiver for the outcome now (nothing is re-sent). " +
      "An undecided answer returns a needs-review action to review."),
    button);
}

