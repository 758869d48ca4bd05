// The package's entry point: the hand-written layer and the generated messages, enums and
// service descriptors. google.rpc details and the rest stay importable from ./gen/.
export {
  createClients,
  bearerAuth,
  withReachstoreErrors,
  DEFAULT_GRPC_PORT_BASE,
  DEFAULT_TIMEOUT_MS,
  resolveTls,
  type ClientOptions,
  type TlsOptions,
  type ReachstoreClients,
} from "./clients.js";
export { ReachstoreError, categoryName, type CategoryName } from "./errors.js";
export {
  coverage,
  failures,
  isComplete,
  permanentFailures,
  retryDelayMs,
  retryableFailures,
  retryableNamespaces,
  summarize,
  type FailureSummary,
  type WithFailures,
} from "./partial.js";

// PartialFailure and Category are shared by every service; the rest is grouped per
// package because ingest and reach both define Task, TaskState and GetTaskRequest.
export * from "./gen/reachstore/common/v1/partial_failure_pb.js";
export * as queryv1 from "./gen/reachstore/query/v1/query_service_pb.js";
export * as ingestv1 from "./gen/reachstore/ingest/v1/ingest_service_pb.js";
export * as adminv1 from "./gen/reachstore/admin/v1/key_service_pb.js";
export * as reachv1 from "./gen/reachstore/reach/v1/reach_service_pb.js";
export * as auditv1 from "./gen/reachstore/audit/v1/audit_service_pb.js";
