// Whole-request errors. A reachstore service refuses a request with a gRPC status whose
// `grpc-status-details-bin` trailer holds a google.rpc.Status: ErrorInfo (the catalogue
// code), RetryInfo, BadRequest, QuotaFailure, and the same PartialFailure message that
// describes failed parts of successful answers. ReachstoreError flattens that into the
// few fields an agent decides on, so callers never parse messages.
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  QuotaFailureSchema,
  RetryInfoSchema,
  type BadRequest_FieldViolation,
  type ErrorInfo,
  type QuotaFailure_Violation,
} from "./gen/google/rpc/error_details_pb.js";
import {
  Category,
  PartialFailureSchema,
  type PartialFailure,
} from "./gen/reachstore/common/v1/partial_failure_pb.js";

/** The failure categories as the REST bridge and the docs spell them. */
export type CategoryName = "auth" | "permanent" | "transient" | "timeout" | "quota" | "unspecified";

/** `Category.TIMEOUT` → `"timeout"`. */
export function categoryName(category: Category): CategoryName {
  const name = Category[category] as string | undefined;
  return (name ?? "UNSPECIFIED").toLowerCase() as CategoryName;
}

/** A proto int64 of milliseconds as a number (every wait reachstore sends fits easily). */
export function millis(value: bigint | undefined): number | undefined {
  return value === undefined ? undefined : Number(value);
}

/**
 * A request that reachstore refused as a whole (or that never reached it). Every call
 * made through `createClients` rejects with one of these; the ConnectError it was built
 * from stays available as `cause`.
 */
export class ReachstoreError extends Error {
  /** The catalogue code, e.g. "INVALID_ARGUMENT", "RATE_LIMITED" (see docs/ERRORS.md). */
  readonly code: string;
  /** What kind of problem it is; decide from this and `retryable`, never from `message`. */
  readonly category: CategoryName;
  /** Whether sending the same request again may succeed. */
  readonly retryable: boolean;
  /** How long to wait before retrying; undefined when not retryable. */
  readonly retryAfterMs: number | undefined;
  /** Machine-readable context: the offending field, limits and actual values, replacements. */
  readonly structuredData: JsonObject;
  /** The gRPC status code. */
  readonly grpcCode: Code;
  /** The gRPC status name, e.g. "INVALID_ARGUMENT". */
  readonly grpcStatus: string;
  /**
   * The error's own PartialFailure followed by any others packed with it: a query with
   * `allowPartial: false` that missed namespaces fails with INCOMPLETE_RESULT and lists
   * the failure of each missing namespace here. Empty when the status had none (the
   * request never reached a reachstore service, or the deadline ran out on this side).
   */
  readonly failures: PartialFailure[];
  /** google.rpc.ErrorInfo, when present. */
  readonly errorInfo: ErrorInfo | undefined;
  /** google.rpc.BadRequest field violations. */
  readonly fieldViolations: BadRequest_FieldViolation[];
  /** google.rpc.QuotaFailure violations. */
  readonly quotaViolations: QuotaFailure_Violation[];
  override readonly cause: ConnectError;

  constructor(cause: ConnectError) {
    const failures = cause.findDetails(PartialFailureSchema);
    const own = failures[0];
    const errorInfo = cause.findDetails(ErrorInfoSchema)[0];
    const retryInfo = cause.findDetails(RetryInfoSchema)[0];
    super(own?.message || cause.rawMessage || cause.message);
    this.name = "ReachstoreError";
    this.cause = cause;
    this.grpcCode = cause.code;
    this.grpcStatus = codeToString(cause.code).toUpperCase();
    this.failures = failures;
    this.errorInfo = errorInfo;
    this.fieldViolations = cause.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations);
    this.quotaViolations = cause.findDetails(QuotaFailureSchema).flatMap((q) => q.violations);

    if (own !== undefined) {
      this.code = own.errorCode;
      this.category = categoryName(own.category);
      this.retryable = own.retryable;
      this.retryAfterMs = millis(own.retryAfterMs);
      this.structuredData = own.structuredData ?? {};
      return;
    }
    // No PartialFailure: a status from something other than a reachstore service (a
    // proxy, the transport, a deadline that ran out here). Use the standard details when
    // there are any, otherwise what the gRPC code itself says.
    const fallback = categoryFromGrpc(cause.code);
    const infoCategory = errorInfo?.metadata["category"];
    this.code = errorInfo?.reason || this.grpcStatus;
    this.category = infoCategory
      ? (infoCategory.replace(/^CATEGORY_/, "").toLowerCase() as CategoryName)
      : fallback.category;
    this.retryable = errorInfo?.metadata["retryable"]
      ? errorInfo.metadata["retryable"] === "true"
      : fallback.retryable;
    const delay = retryInfo?.retryDelay;
    this.retryAfterMs =
      delay !== undefined
        ? Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6)
        : undefined;
    this.structuredData = {};
  }

  /** Turns anything a call threw into a ReachstoreError (ConnectError.from for the rest). */
  static from(reason: unknown): ReachstoreError {
    if (reason instanceof ReachstoreError) {
      return reason;
    }
    return new ReachstoreError(ConnectError.from(reason));
  }
}

function categoryFromGrpc(code: Code): { category: CategoryName; retryable: boolean } {
  switch (code) {
    case Code.Unauthenticated:
    case Code.PermissionDenied:
      return { category: "auth", retryable: false };
    case Code.DeadlineExceeded:
      return { category: "timeout", retryable: true };
    case Code.Unavailable:
    case Code.Aborted:
    // A service too busy to take a call in time has gRPC cancel it (docs/OPERATIONS.md,
    // "Load shedding"): an overload, worth a retry.
    case Code.Canceled:
      return { category: "transient", retryable: true };
    case Code.ResourceExhausted:
      return { category: "quota", retryable: true };
    default:
      return { category: "permanent", retryable: false };
  }
}
