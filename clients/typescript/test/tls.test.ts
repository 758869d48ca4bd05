// The TypeScript client against a `reachstore up` that speaks TLS only, with a CA and
// certificates made for the test (tests/e2e/tls_certs.py): a client that trusts the CA
// gets answers, one that speaks plain text or trusts another CA gets none.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Code } from "@connectrpc/connect";
import { ReachstoreError, createClients, type TlsOptions } from "../src/index.js";
import { REPO_ROOT, RunningSystem } from "./system.js";

const PYTHON = process.env["REACHSTORE_PYTHON"] ?? join(REPO_ROOT, ".venv", "bin", "python");

async function search(grpcPortBase: number, tls: TlsOptions | boolean) {
  const clients = createClients({ grpcPortBase, tls, timeoutMs: 5_000 });
  try {
    return await clients.query.query({ namespaces: ["demo"], query: "semantic storage", topK: 1 });
  } finally {
    clients.close();
  }
}

describe("TypeScript client over TLS", () => {
  let system: RunningSystem;
  let certs: string;

  before(async () => {
    certs = mkdtempSync(join(tmpdir(), "reachstore-ts-certs-"));
    execFileSync(PYTHON, ["-m", "tests.e2e.tls_certs", certs], { cwd: REPO_ROOT });
    system = await RunningSystem.start({}, [
      "--tls-cert", join(certs, "server.pem"),
      "--tls-key", join(certs, "server.key"),
      "--tls-ca", join(certs, "ca.pem"),
    ]);
  });

  after(async () => {
    await system?.stop();
    rmSync(certs, { recursive: true, force: true });
  });

  it("answers a client that trusts the CA", async () => {
    const reply = await search(system.grpcPortBase, { caFile: join(certs, "ca.pem") });
    assert.equal(reply.meta?.coverageRatio, 1);
    assert.equal(reply.results.length, 1);
  });

  it("checks the name the caller expects, not only the CA", async () => {
    const ca = join(certs, "ca.pem");
    const named = await search(system.grpcPortBase, { caFile: ca, serverName: "reachstore.test" });
    assert.equal(named.results.length, 1);
    await assert.rejects(search(system.grpcPortBase, { caFile: ca, serverName: "elsewhere.test" }), (err) => {
      assert.ok(err instanceof ReachstoreError);
      assert.match(err.message, /altnames/);
      return true;
    });
  });

  it("gives nothing to a client speaking plain text", async () => {
    // The server answers a plain HTTP/2 preface on its TLS port by closing the stream.
    await assert.rejects(search(system.grpcPortBase, false), (err) => {
      assert.ok(err instanceof ReachstoreError, String(err));
      assert.notEqual(err.grpcCode, Code.Unknown);
      return true;
    });
  });

  it("gives nothing to a client that trusts another CA", async () => {
    const other = { caFile: join(certs, "other-ca.pem") };
    await assert.rejects(search(system.grpcPortBase, other), (err) => {
      assert.ok(err instanceof ReachstoreError, String(err));
      assert.match(err.message, /unable to verify/);
      return true;
    });
  });
});
