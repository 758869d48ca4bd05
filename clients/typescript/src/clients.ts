// Typed clients for the five reachstore services over gRPC (HTTP/2: plain text, as a local
// `reachstore up` speaks, or TLS when it was given a certificate), with the caller's key and
// a default deadline on every call, and failed calls rejected with a ReachstoreError.
import { readFileSync } from "node:fs";
import type { SecureClientSessionOptions } from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import { checkServerIdentity } from "node:tls";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { KeyService } from "./gen/reachstore/admin/v1/key_service_pb.js";
import { AuditService } from "./gen/reachstore/audit/v1/audit_service_pb.js";
import { IngestService } from "./gen/reachstore/ingest/v1/ingest_service_pb.js";
import { QueryService } from "./gen/reachstore/query/v1/query_service_pb.js";
import { ReachService } from "./gen/reachstore/reach/v1/reach_service_pb.js";
import { ReachstoreError } from "./errors.js";

export interface ClientOptions {
  /** Where `reachstore up` listens (default 127.0.0.1). */
  host?: string;
  /**
   * The `--grpc-port-base` of `reachstore up` (default 50051): query listens on it,
   * ingest and key administration on +1, reach on +2, audit on +3.
   */
  grpcPortBase?: number;
  /**
   * Sent as `authorization: Bearer <key>`. Defaults to the REACHSTORE_API_KEY environment
   * variable; without either, calls go keyless, which only a system in local-development
   * mode (no `--require-keys`) accepts.
   */
  apiKey?: string;
  /**
   * Deadline of every call in milliseconds unless the call passes its own `timeoutMs`
   * (default 10,000; 0 for none). The server sees it as `grpc-timeout` and stops working
   * on the call when it runs out.
   */
  timeoutMs?: number;
  /** More interceptors, run inside the ones added here. */
  interceptors?: Interceptor[];
  /**
   * TLS to a system started with `--tls-cert`. Without it, the REACHSTORE_TLS_CA_FILE,
   * REACHSTORE_TLS_CERT_FILE, REACHSTORE_TLS_KEY_FILE and REACHSTORE_TLS_SERVER_NAME
   * environment variables decide (plain text when none is set); `false` forces plain text.
   */
  tls?: TlsOptions | boolean;
}

/** Paths of PEM files, as the services take them. */
export interface TlsOptions {
  /** Authorities the server's certificate is checked against (default: Node's own). */
  caFile?: string;
  /** The client's certificate, for a system that requires mutual TLS; with `keyFile`. */
  certFile?: string;
  keyFile?: string;
  /** The name the server's certificate must carry, when it is not `host`. */
  serverName?: string;
}

/** The TLS the options ask for, or undefined for plain text. */
export function resolveTls(tls: TlsOptions | boolean | undefined): TlsOptions | undefined {
  if (tls === false) {
    return undefined;
  }
  if (tls === true) {
    return {};
  }
  if (tls !== undefined) {
    return tls;
  }
  const env = process.env;
  const fromEnv: TlsOptions = {
    caFile: env["REACHSTORE_TLS_CA_FILE"] || undefined,
    certFile: env["REACHSTORE_TLS_CERT_FILE"] || undefined,
    keyFile: env["REACHSTORE_TLS_KEY_FILE"] || undefined,
    serverName: env["REACHSTORE_TLS_SERVER_NAME"] || undefined,
  };
  return Object.values(fromEnv).some((value) => value !== undefined) ? fromEnv : undefined;
}

function sessionOptions(tls: TlsOptions): SecureClientSessionOptions {
  if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) {
    throw new Error("tls.certFile and tls.keyFile go together: a certificate needs its key");
  }
  return {
    ca: tls.caFile ? readFileSync(tls.caFile) : undefined,
    cert: tls.certFile ? readFileSync(tls.certFile) : undefined,
    key: tls.keyFile ? readFileSync(tls.keyFile) : undefined,
    servername: tls.serverName,
    // Node checks the name itself; an IP address is checked against the certificate's
    // IP entries.
    ...(tls.serverName
      ? {
          checkServerIdentity: (_host: string, cert) =>
            checkServerIdentity(tls.serverName as string, cert),
        }
      : {}),
  };
}

export interface ReachstoreClients {
  query: Client<typeof QueryService>;
  ingest: Client<typeof IngestService>;
  keys: Client<typeof KeyService>;
  reach: Client<typeof ReachService>;
  audit: Client<typeof AuditService>;
  /** Closes the open HTTP/2 connections, and with them any call still running. */
  close(): void;
}

export const DEFAULT_GRPC_PORT_BASE = 50051;
export const DEFAULT_TIMEOUT_MS = 10_000;

/** Adds `authorization: Bearer <key>` to every call that does not set its own. */
export function bearerAuth(apiKey: string): Interceptor {
  return (next) => async (req) => {
    if (!req.header.has("authorization")) {
      req.header.set("authorization", `Bearer ${apiKey}`);
    }
    return next(req);
  };
}

/**
 * The same client, but every failed call rejects with a ReachstoreError. This cannot be an
 * interceptor: the client turns whatever an interceptor throws back into a ConnectError.
 */
export function withReachstoreErrors<S extends DescService>(service: S, client: Client<S>): Client<S> {
  const wrapped: Record<string, unknown> = {};
  const calls = client as unknown as Record<string, (...args: unknown[]) => unknown>;
  for (const method of service.methods) {
    const call = calls[method.localName]!;
    // Every reachstore RPC is unary; a streaming one would need its iterator wrapped too.
    wrapped[method.localName] =
      method.methodKind === "unary"
        ? async (...args: unknown[]) => {
            try {
              return await call(...args);
            } catch (reason) {
              throw ReachstoreError.from(reason);
            }
          }
        : call;
  }
  return wrapped as Client<S>;
}

export function createClients(options: ClientOptions = {}): ReachstoreClients {
  const host = options.host ?? "127.0.0.1";
  const base = options.grpcPortBase ?? DEFAULT_GRPC_PORT_BASE;
  const apiKey = options.apiKey ?? process.env["REACHSTORE_API_KEY"];
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  const interceptors: Interceptor[] = apiKey ? [bearerAuth(apiKey)] : [];
  interceptors.push(...(options.interceptors ?? []));

  // One session manager per port, kept here so that close() can end the connections; an
  // idle connection does not keep Node running, but a script that is done should not
  // have to wait for the server to notice.
  const sessions: Http2SessionManager[] = [];
  const tls = resolveTls(options.tls);
  const secure = tls ? sessionOptions(tls) : undefined;
  const transportFor = (port: number): Transport => {
    const scheme = tls ? "https" : "http";
    const baseUrl = `${scheme}://${host.includes(":") ? `[${host}]` : host}:${port}`;
    const sessionManager = new Http2SessionManager(baseUrl, undefined, secure);
    sessions.push(sessionManager);
    return createGrpcTransport({
      baseUrl,
      sessionManager,
      interceptors,
      // The transport, not an interceptor, owns the deadline: it both sends `grpc-timeout`
      // and aborts the call locally when the time is up. A call's own timeoutMs wins.
      defaultTimeoutMs: timeoutMs > 0 ? timeoutMs : undefined,
    });
  };
  const ingestTransport = transportFor(base + 1);
  const client = <S extends DescService>(service: S, transport: Transport): Client<S> =>
    withReachstoreErrors(service, createClient(service, transport));

  return {
    query: client(QueryService, transportFor(base)),
    ingest: client(IngestService, ingestTransport),
    // Key administration is served by the ingest process, on the same port.
    keys: client(KeyService, ingestTransport),
    reach: client(ReachService, transportFor(base + 2)),
    audit: client(AuditService, transportFor(base + 3)),
    close() {
      for (const session of sessions) {
        session.abort();
      }
    },
  };
}
