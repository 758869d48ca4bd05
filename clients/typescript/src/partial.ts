// Partial answers. A query across namespaces answers with whatever worked plus one
// PartialFailure per namespace that did not; a batch upload does the same per document.
// These helpers read that account the same way for every response shape, so an agent can
// ask "is this complete?", "what may I retry, and when?" without knowing where each
// response keeps its failures.
import type { JsonObject } from "@bufbuild/protobuf";
import type { PartialFailure } from "./gen/reachstore/common/v1/partial_failure_pb.js";
import { categoryName, millis, type CategoryName } from "./errors.js";

/** A response that accounts for its missing parts in one of the three ways reachstore uses. */
export type WithFailures =
  | { meta?: { coverageRatio: number; namespacesFailed: PartialFailure[] } } // QueryResponse
  | { meta?: { coverageRatio: number; failed: PartialFailure[] } } // BatchCreateDocumentsResponse
  | { partialFailures: PartialFailure[] }; // every other response (always empty today)

/** The failed parts of a response, in the order the server listed them. */
export function failures(resp: WithFailures): PartialFailure[] {
  if ("partialFailures" in resp) {
    return resp.partialFailures;
  }
  const meta = resp.meta;
  if (meta === undefined) {
    return [];
  }
  return "namespacesFailed" in meta ? meta.namespacesFailed : meta.failed;
}

/**
 * The share of the request that was answered, 0 to 1: namespaces that answered over
 * namespaces queried, or documents accepted over documents sent. Responses without a
 * coverage field count as complete unless they list failures.
 */
export function coverage(resp: WithFailures): number {
  if ("meta" in resp && resp.meta !== undefined) {
    return resp.meta.coverageRatio;
  }
  return failures(resp).length === 0 ? 1 : 0;
}

/** True when nothing is missing from the answer. */
export function isComplete(resp: WithFailures): boolean {
  return coverage(resp) >= 1 && failures(resp).length === 0;
}

/** The failed parts that may succeed if asked again (after `retryDelayMs`). */
export function retryableFailures(resp: WithFailures): PartialFailure[] {
  return failures(resp).filter((f) => f.retryable);
}

/** The failed parts that will fail again as sent: fix the request or give up on them. */
export function permanentFailures(resp: WithFailures): PartialFailure[] {
  return failures(resp).filter((f) => !f.retryable);
}

/**
 * The namespaces worth asking again, for a follow-up query that asks only for what is
 * missing instead of repeating the namespaces that already answered.
 */
export function retryableNamespaces(resp: WithFailures): string[] {
  return retryableFailures(resp)
    .map((f) => f.namespace)
    .filter((ns) => ns !== "");
}

/**
 * How long to wait before retrying the retryable parts: the longest `retry_after_ms`
 * among them, so that one wait covers all of them. Undefined when nothing is retryable.
 */
export function retryDelayMs(resp: WithFailures): number | undefined {
  const waits = retryableFailures(resp).map((f) => millis(f.retryAfterMs) ?? 0);
  return waits.length === 0 ? undefined : Math.max(...waits);
}

/** A PartialFailure as plain JSON-friendly data (category as a word, waits as numbers). */
export interface FailureSummary {
  namespace?: string;
  documentId?: string;
  batchIndex?: number;
  actionId?: string;
  category: CategoryName;
  errorCode: string;
  message: string;
  retryable: boolean;
  retryAfterMs?: number;
  structuredData: JsonObject;
}

export function summarize(failure: PartialFailure): FailureSummary {
  // Only the locating field that names the part is kept; the others are empty strings.
  return {
    ...(failure.namespace && { namespace: failure.namespace }),
    ...(failure.documentId && { documentId: failure.documentId }),
    ...(failure.batchIndex !== undefined && { batchIndex: failure.batchIndex }),
    ...(failure.actionId && { actionId: failure.actionId }),
    category: categoryName(failure.category),
    errorCode: failure.errorCode,
    message: failure.message,
    retryable: failure.retryable,
    ...(failure.retryAfterMs !== undefined && { retryAfterMs: Number(failure.retryAfterMs) }),
    structuredData: failure.structuredData ?? {},
  };
}
