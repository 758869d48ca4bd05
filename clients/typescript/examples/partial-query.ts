// The README's partial answer, from TypeScript: one question across the seeded `demo`
// namespace and one that does not exist. The answer is not an error: it carries the
// `demo` result, coverage 0.5 and an exact account of what is missing.
//
//   make up                                        # in another terminal
//   cd clients/typescript && npm run example
//
// REACHSTORE_HOST, REACHSTORE_GRPC_PORT_BASE and REACHSTORE_API_KEY point it elsewhere.
import {
  ReachstoreError,
  coverage,
  createClients,
  permanentFailures,
  retryDelayMs,
  retryableNamespaces,
  summarize,
} from "../src/index.js";

const clients = createClients({
  host: process.env["REACHSTORE_HOST"] ?? "127.0.0.1",
  grpcPortBase: Number(process.env["REACHSTORE_GRPC_PORT_BASE"] ?? 50051),
});

try {
  const answer = await clients.query.query({
    namespaces: ["demo", "nope"],
    query: "语义存储把什么放在离 Agent 更近的地方？",
    topK: 2,
  });
  const meta = answer.meta!;
  console.log(
    JSON.stringify(
      {
        results: answer.results.map((r) => ({
          namespace: r.namespace,
          document_id: r.documentId,
          score: Number(r.score.toFixed(4)),
          text: r.text.slice(0, 80),
        })),
        meta: {
          coverage_ratio: coverage(answer),
          namespaces_queried: meta.namespacesQueried,
          namespaces_succeeded: meta.namespacesSucceeded,
          namespaces_failed: meta.namespacesFailed.map(summarize),
        },
        // What an agent does next, decided from category and retryable alone.
        next: {
          ask_again: retryableNamespaces(answer),
          after_ms: retryDelayMs(answer) ?? null,
          give_up_on: permanentFailures(answer).map((f) => f.namespace),
        },
      },
      null,
      2,
    ),
  );
} catch (err) {
  // Only a request that is wrong as a whole (or a system that cannot be reached) gets here.
  if (err instanceof ReachstoreError) {
    console.error(`${err.code} (${err.category}, retryable: ${err.retryable}): ${err.message}`);
    process.exitCode = 1;
  } else {
    throw err;
  }
} finally {
  clients.close();
}
