// The console's entry point: sign-in with an operator key (kept in sessionStorage for this
// tab only), and the views behind hash links (#/queue, #/unknowns, #/health, #/audit), so the
// browser's back button and bookmarks work and every view is a real link.

import { api, savedKey, saveKey, forgetKey } from "./api.js";
import { clear, h } from "./dom.js";
import { describeError, retryAdvice } from "./notices.js";
import { renderQueue } from "./queue.js";
import { renderHealth } from "./health.js";
import { renderAudit } from "./audit.js";
import { renderUnknowns } from "./unknowns.js";

const VIEWS = { queue: renderQueue, unknowns: renderUnknowns, health: renderHealth, audit: renderAudit };
const TITLES = { queue: "Review queue", unknowns: "UNKNOWN review", health: "Health", audit: "Audit" };

const el = (id) => document.getElementById(id);

function showLogin(message) {
  el("nav").hidden = true;
  el("who").hidden = true;
  el("view").hidden = true;
  el("login").hidden = false;
  clear(el("login-status"));
  if (message) el("login-status").append(h("p", { class: "notice error" }, message));
  el("login-key").value = "";
  el("login-key").focus();
}

function showApp() {
  el("login").hidden = true;
  el("nav").hidden = false;
  el("who").hidden = false;
  el("view").hidden = false;
  const key = savedKey();
  // Only the key id (the part before the secret) is shown.
  const id = /^rsk_([0-9a-f]{16})_/.exec(key);
  el("who-key").textContent = id ? `key ${id[1]}` : "local key";
  route();
}

function route() {
  if (!savedKey()) return;
  const name = (window.location.hash.replace(/^#\/?/, "") || "queue").split("?")[0];
  const view = VIEWS[name] ? name : "queue";
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${TITLES[view]} · reachstore console`;
  const heading = VIEWS[view](el("view"));
  if (heading) heading.focus();
}

async function signIn(event) {
  event.preventDefault();
  const key = el("login-key").value.trim();
  const status = el("login-status");
  clear(status).append(h("p", { class: "notice loading" }, "Checking the key…"));
  saveKey(key);
  try {
    // The review queue needs the operator scope: a key without it is told so at once.
    await api.listActions({ page_size: 1 });
  } catch (err) {
    if (err.isAuth) {
      forgetKey();
      clear(status).append(h("p", { class: "notice error", role: "alert" },
        `${describeError(err)} ${retryAdvice(err)}`));
      el("login-key").focus();
      return;
    }
    // Reach may be down: the key could not be checked, but the other views may work.
  }
  if (!window.location.hash) window.location.hash = "#/queue";
  showApp();
}

function signOut() {
  forgetKey();
  showLogin("Signed out. The key was removed from this tab.");
}

el("login-form").addEventListener("submit", signIn);
el("sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
if (savedKey()) showApp();
else showLogin();
