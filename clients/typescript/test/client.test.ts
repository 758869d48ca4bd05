// The TypeScript client against a real system: `reachstore up` started here, the Python
// services answering over gRPC. The `slow` namespace is held back 5 s by the fault
// setting, so a query with a small per-namespace budget gets a genuine partial answer.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  Category,
  ReachstoreError,
  coverage,
  createClients,
  failures,
  ingestv1,
  isComplete,
  permanentFailures,
  retryDelayMs,
  retryableFailures,
  retryableNamespaces,
  type ReachstoreClients,
} from "../src/index.js";
import { REPO_ROOT, RunningSystem } from "./system.js";

const SLOW_DELAY_MS = 5_000;
const QUESTION = "语义存储把什么放在离 Agent 更近的地方？";

/** Calls `fn` and returns the ReachstoreError it rejects with (fails if it resolves). */
async function refusal(fn: () => Promise<unknown>): Promise<ReachstoreError> {
  try {
    await fn();
  } catch (err) {
    assert.ok(err instanceof ReachstoreError, `expected a ReachstoreError, got ${String(err)}`);
    return err;
  }
  assert.fail("the call succeeded");
}

async function waitForTask(clients: ReachstoreClients, taskId: string): Promise<ingestv1.Task> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { task } = await clients.ingest.getTask({ taskId });
    assert.ok(task);
    if (task.state !== ingestv1.TaskState.QUEUED && task.state !== ingestv1.TaskState.PROCESSING) {
      return task;
    }
    assert.ok(Date.now() < deadline, `task ${taskId} did not finish`);
    await new Promise((resolve) => setTimeout(resolve, Number(task.pollAfterMs ?? 100n)));
  }
}

describe("statuses without reachstore's details", () => {
  it("reads a call the service did not take in time (CANCELLED) as a retryable overload", () => {
    const err = new ReachstoreError(new ConnectError("CANCELLED", Code.Canceled));
    assert.equal(err.category, "transient");
    assert.equal(err.retryable, true);
  });
});

describe("TypeScript client against reachstore up", () => {
  let system: RunningSystem;
  let clients: ReachstoreClients;

  before(async () => {
    system = await RunningSystem.start(
      { REACHSTORE_FAULT_NAMESPACE_DELAY_MS: `slow=${SLOW_DELAY_MS}`, TICKETING_TOKEN: "test-token" },
      ["--reach-config", join(REPO_ROOT, "examples", "reach.toml")],
    );
    // No key: the system runs in local-development mode (no --require-keys).
    clients = createClients({ grpcPortBase: system.grpcPortBase, apiKey: "" });
    for (const [name, text] of [
      ["fast", "Rivers flow into the sea."],
      ["slow", "Rivers flow into lakes too."],
    ]) {
      const created = await clients.ingest.createNamespace({ name });
      assert.equal(created.namespace?.name, name);
      const { task } = await clients.ingest.createDocument({
        namespace: name,
        document: { documentId: `${name}-1`, text },
      });
      const done = await waitForTask(clients, task!.taskId);
      assert.equal(done.state, ingestv1.TaskState.COMPLETED, JSON.stringify(done.error));
    }
  });

  after(async () => {
    clients?.close();
    if (system) {
      assert.equal(await system.stop(), 0, system.tail());
    }
  });

  it("answers the README's partial query: demo answers, nope is missing", async () => {
    const answer = await clients.query.query({ namespaces: ["demo", "nope"], query: QUESTION, topK: 2 });
    assert.equal(coverage(answer), 0.5);
    assert.equal(isComplete(answer), false);
    assert.deepEqual(answer.meta?.namespacesSucceeded, ["demo"]);
    assert.ok(answer.results.length > 0 && answer.results.every((r) => r.namespace === "demo"));
    const [missing] = failures(answer);
    assert.equal(missing?.namespace, "nope");
    assert.equal(missing?.category, Category.PERMANENT);
    assert.equal(missing?.errorCode, "NAMESPACE_UNAVAILABLE");
    assert.equal(missing?.retryable, false);
    assert.deepEqual(missing?.structuredData, { namespace: "nope", index_state: "unavailable" });
    assert.deepEqual(permanentFailures(answer).map((f) => f.namespace), ["nope"]);
    assert.equal(retryDelayMs(answer), undefined);
  });

  it("reports a slow namespace as a retryable timeout while the other answers", async () => {
    const started = Date.now();
    const answer = await clients.query.query({
      namespaces: ["fast", "slow"],
      query: "rivers",
      timeoutMs: 300,
    });
    assert.ok(Date.now() - started < SLOW_DELAY_MS, "the answer came at the budget, not after the delay");
    assert.ok(coverage(answer) < 1);
    assert.equal(coverage(answer), 0.5);
    assert.deepEqual(answer.results.map((r) => r.namespace), ["fast"]);
    const [slow] = retryableFailures(answer);
    assert.equal(slow?.namespace, "slow");
    assert.equal(slow?.category, Category.TIMEOUT);
    assert.equal(slow?.errorCode, "NAMESPACE_TIMEOUT");
    assert.equal(slow?.retryable, true);
    assert.ok((slow?.retryAfterMs ?? 0n) > 0n);
    assert.equal(slow?.structuredData?.["timeout_ms"], 300);
    assert.deepEqual(retryableNamespaces(answer), ["slow"]);
    assert.equal(retryDelayMs(answer), Number(slow?.retryAfterMs));
  });

  it("decodes a whole-request error from the rich status", async () => {
    const err = await refusal(() => clients.ingest.createNamespace({ name: "Not A Valid Name!" }));
    assert.equal(err.grpcCode, Code.InvalidArgument);
    assert.equal(err.grpcStatus, "INVALID_ARGUMENT");
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.category, "permanent");
    assert.equal(err.retryable, false);
    assert.equal(err.retryAfterMs, undefined);
    assert.equal(err.structuredData["field"], "name");
    assert.deepEqual(err.fieldViolations.map((v) => v.field), ["name"]);
    assert.equal(err.errorInfo?.reason, "INVALID_ARGUMENT");
    assert.equal(err.errorInfo?.metadata["category"], "CATEGORY_PERMANENT");
  });

  it("names the replacement of a deprecated field", async () => {
    const err = await refusal(() => clients.query.query({ namespace: "demo", query: QUESTION }));
    assert.equal(err.code, "DEPRECATED_FIELD");
    assert.equal(err.category, "permanent");
    assert.equal(err.structuredData["use_instead"], "namespaces");
  });

  it("fails an incomplete strict query with every missing namespace in the error", async () => {
    const err = await refusal(() =>
      clients.query.query({
        namespaces: ["fast", "slow"],
        query: "rivers",
        timeoutMs: 300,
        allowPartial: false,
      }),
    );
    assert.equal(err.code, "INCOMPLETE_RESULT");
    assert.equal(err.category, "transient");
    assert.equal(err.retryable, true);
    assert.ok((err.retryAfterMs ?? 0) > 0);
    const missing = err.failures.slice(1);
    assert.deepEqual(missing.map((f) => [f.namespace, f.errorCode]), [["slow", "NAMESPACE_TIMEOUT"]]);
  });

  it("applies the call's deadline and reports it as a retryable timeout", async () => {
    const err = await refusal(() =>
      clients.query.query({ namespaces: ["slow"], query: "rivers", timeoutMs: 4_000 }, { timeoutMs: 200 }),
    );
    assert.equal(err.grpcCode, Code.DeadlineExceeded);
    assert.equal(err.category, "timeout");
    assert.equal(err.retryable, true);
  });

  it("sends the API key as a bearer token", async () => {
    const { secret } = await clients.keys.createKey({ name: "ts reader", scopes: ["read"] });
    assert.match(secret, /^rsk_/);
    const reader = createClients({ grpcPortBase: system.grpcPortBase, apiKey: secret });
    try {
      const answer = await reader.query.query({ namespaces: ["fast"], query: "rivers" });
      assert.equal(coverage(answer), 1);
      const denied = await refusal(() => reader.ingest.createNamespace({ name: "not-allowed" }));
      assert.equal(denied.code, "AUTH_SCOPE_MISSING");
      assert.equal(denied.category, "auth");
      assert.equal(denied.structuredData["required_scope"], "write");
    } finally {
      reader.close();
    }
    // Well-formed, but no such key exists.
    const unknownKey = `rsk_${"0".repeat(16)}_${"x".repeat(43)}`;
    const stranger = createClients({ grpcPortBase: system.grpcPortBase, apiKey: unknownKey });
    try {
      const err = await refusal(() => stranger.query.query({ namespaces: ["fast"], query: "rivers" }));
      assert.equal(err.grpcCode, Code.Unauthenticated);
      assert.equal(err.code, "AUTH_INVALID_KEY");
      assert.equal(err.category, "auth");
    } finally {
      stranger.close();
    }
  });

  it("lists the reach channels as tools", async () => {
    const { channels } = await clients.reach.listChannels({});
    const names = channels.map((c) => c.name).sort();
    assert.ok(names.includes("ticket-dispatch"), names.join(", "));
  });

  it("shows the CreateNamespace calls in the audit trail", async () => {
    // Services ship their events to audit from an outbox, so they arrive shortly after.
    const deadline = Date.now() + 15_000;
    for (;;) {
      const { events } = await clients.audit.listEvents({ method: "CreateNamespace", pageSize: 100 });
      const ok = events.filter((e) => e.resultStatus === "ok");
      const refused = events.filter((e) => e.resultStatus === "INVALID_ARGUMENT");
      // demo (seeded by up), fast, slow; and the invalid name refused above.
      if (ok.length >= 3 && refused.length >= 1) {
        assert.ok(events.every((e) => e.service === "ingest" && e.hash.length === 64));
        assert.equal(refused[0]?.errorCode, "INVALID_ARGUMENT");
        assert.equal(refused[0]?.category, Category.PERMANENT);
        break;
      }
      assert.ok(Date.now() < deadline, `audit shows ${ok.length} ok and ${refused.length} refused events`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });

  it("runs the example script", async () => {
    const script = join(REPO_ROOT, "clients", "typescript", "dist", "examples", "partial-query.js");
    const { stdout } = await promisify(execFile)(process.execPath, [script], {
      env: { ...process.env, REACHSTORE_GRPC_PORT_BASE: String(system.grpcPortBase), REACHSTORE_API_KEY: "" },
      timeout: 20_000,
    });
    const printed = JSON.parse(stdout);
    assert.equal(printed.meta.coverage_ratio, 0.5);
    assert.deepEqual(printed.meta.namespaces_succeeded, ["demo"]);
    assert.equal(printed.meta.namespaces_failed[0].category, "permanent");
    assert.deepEqual(printed.next.give_up_on, ["nope"]);
  });
});
