// The REST API, as the console calls it: the operator's key from sessionStorage as a bearer
// token, JSON both ways, and every failure turned into an ApiError that says which service
// failed, in which category, and when to try again (from the bridge's error body).

const KEY_ITEM = "reachstore.console.key";

export function savedKey() {
  return window.sessionStorage.getItem(KEY_ITEM) || "";
}

export function saveKey(key) {
  window.sessionStorage.setItem(KEY_ITEM, key);
}

export function forgetKey() {
  window.sessionStorage.removeItem(KEY_ITEM);
}

// Which service answers which route, to name it when the bridge cannot say.
const SERVICE_OF = [
  [/^\/api\/v1\/reach/, "reach"],
  [/^\/api\/v1\/audit/, "audit"],
  [/^\/api\/v1\/namespaces:health/, "query"],
  [/^\/api\/v1\/query/, "query"],
  [/^\/api\/v1\/namespaces/, "ingest"],
];

function serviceOfPath(path) {
  for (const [pattern, name] of SERVICE_OF) if (pattern.test(path)) return name;
  return "bridge";
}

function serviceName(full) {
  // "reachstore.reach.v1.ReachService" -> "reach"
  const parts = (full || "").split(".");
  return parts.length > 1 ? parts[1] : full;
}

export class ApiError extends Error {
  constructor({ status, code, message, category, retryable, retryAfterMs, service, data }) {
    super(message);
    this.status = status;
    this.code = code;
    this.category = category;
    this.retryable = retryable;
    this.retryAfterMs = retryAfterMs;
    this.service = service;
    this.data = data || {};
  }

  get isAuth() {
    return this.category === "auth" || this.status === 401 || this.status === 403;
  }
}

export async function call(method, path, { query, body } = {}) {
  let url = path;
  if (query) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      const values = Array.isArray(value) ? value : [value];
      for (const v of values) if (v !== undefined && v !== null && v !== "") params.append(name, v);
    }
    const text = params.toString();
    if (text) url += `?${text}`;
  }
  const headers = { Accept: "application/json" };
  const key = savedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (err) {
    throw new ApiError({
      status: 0,
      code: "BRIDGE_UNREACHABLE",
      message: `The console could not reach the server at ${window.location.origin}: ${err.message}`,
      category: "transient",
      retryable: true,
      retryAfterMs: 5000,
      service: "bridge",
    });
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (response.ok && payload) return payload;
  const error = (payload && payload.error) || {};
  const data = error.structured_data || {};
  const header = Number(response.headers.get("Retry-After"));
  throw new ApiError({
    status: response.status,
    code: error.code || `HTTP_${response.status}`,
    message: error.message || `The server answered ${response.status} without an error body.`,
    category: error.category || (response.status >= 500 ? "transient" : "permanent"),
    retryable: Boolean(error.retryable),
    retryAfterMs: error.retry_after_ms ?? (header ? header * 1000 : null),
    service: data.service ? serviceName(data.service) : serviceOfPath(path),
    data,
  });
}

export const api = {
  listActions: (query) => call("GET", "/api/v1/reach/actions", { query }),
  getAction: (id) => call("GET", `/api/v1/reach/actions/${encodeURIComponent(id)}`),
  getTask: (id, waitMs = 0) =>
    call("GET", `/api/v1/reach/tasks/${encodeURIComponent(id)}`, {
      query: waitMs ? { wait_ms: waitMs } : undefined,
    }),
  resolveAction: (id, outcome, note) =>
    call("POST", `/api/v1/reach/actions/${encodeURIComponent(id)}:resolve`, {
      body: { outcome, note },
    }),
  recheckAction: (id) =>
    call("POST", `/api/v1/reach/actions/${encodeURIComponent(id)}:recheck`, { body: {} }),
  listChannels: () => call("GET", "/api/v1/reach/channels"),
  channelHealth: (query) => call("GET", "/api/v1/reach/health", { query }),
  unknownReview: (query) => call("GET", "/api/v1/reach/unknowns", { query }),
  namespaceHealth: (query) => call("GET", "/api/v1/namespaces:health", { query }),
  listEvents: (query) => call("GET", "/api/v1/audit/events", { query }),
  verify: (body) => call("POST", "/api/v1/audit:verify", { body }),
  checkpoint: (tenant) => call("GET", "/api/v1/audit/checkpoint", { query: tenant ? { tenant } : {} }),
};
