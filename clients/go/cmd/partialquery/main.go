// Command partialquery asks one question across several namespaces through the generated
// QueryService stub and prints what came back: the results, the coverage and one line per
// namespace that failed. A namespace that fails does not fail the call; only a request that
// is wrong as a whole returns an error, carrying a PartialFailure in its status details.
//
//	make up                                          # in another terminal
//	go run github.com/reachstore/reachstore/cmd/partialquery -addr 127.0.0.1:50051
//
// (GOPATH mode; see clients/go/README.md.) The key, if any, comes from -api-key or
// $REACHSTORE_API_KEY; without one the server treats the caller as the local developer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	commonv1 "github.com/reachstore/reachstore/gen/go/reachstore/common/v1"
	queryv1 "github.com/reachstore/reachstore/gen/go/reachstore/query/v1"
)

func main() {
	addr := flag.String("addr", "", "query service address, host:port (the --grpc-port-base of reachstore up)")
	namespaces := flag.String("namespaces", "demo,nope", "comma-separated namespaces to search")
	question := flag.String("query", "语义存储把什么放在离 Agent 更近的地方？", "the question")
	topK := flag.Int("top-k", 2, "how many merged results to return")
	apiKey := flag.String("api-key", os.Getenv("REACHSTORE_API_KEY"), "the API key, sent as an authorization: Bearer header")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of the call")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "usage: partialquery -addr HOST:PORT [-namespaces a,b] [-query TEXT]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	if err := run(*addr, *apiKey, *timeout, &queryv1.QueryRequest{
		Namespaces: strings.Split(*namespaces, ","),
		Query:      *question,
		TopK:       int32(*topK),
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(addr, apiKey string, timeout time.Duration, req *queryv1.QueryRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if apiKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiKey)
	}
	// Plain text, as `reachstore up` serves locally; grpc 1.33 has no credentials/insecure.
	conn, err := grpc.DialContext(ctx, addr, grpc.WithInsecure())
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()

	resp, err := queryv1.NewQueryServiceClient(conn).Query(ctx, req)
	if err != nil {
		return describeError(err)
	}
	for _, r := range resp.GetResults() {
		fmt.Printf("%-12s %-24s %.4f  %s\n", r.GetNamespace(), r.GetDocumentId(), r.GetScore(), clip(r.GetText(), 60))
	}
	meta := resp.GetMeta()
	fmt.Printf("coverage %.2f: %d of %d namespaces answered (%s)\n",
		meta.GetCoverageRatio(), len(meta.GetNamespacesSucceeded()), len(meta.GetNamespacesQueried()),
		strings.Join(meta.GetNamespacesSucceeded(), ", "))
	for _, f := range meta.GetNamespacesFailed() {
		fmt.Printf("  missing %s\n", summarize(f))
	}
	return nil
}

// describeError turns a whole-request error into one line, from the PartialFailure the
// server packs into the status details (falling back to the status itself).
func describeError(err error) error {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if f, ok := d.(*commonv1.PartialFailure); ok {
			return fmt.Errorf("query failed: %s", summarize(f))
		}
	}
	return fmt.Errorf("query failed: %s: %s", st.Code(), st.Message())
}

// summarize says what failed and whether asking again may help, from fields only.
func summarize(f *commonv1.PartialFailure) string {
	retry := "do not retry as is"
	if f.GetRetryable() {
		retry = "retry"
		if f.RetryAfterMs != nil {
			retry = fmt.Sprintf("retry after %d ms", f.GetRetryAfterMs())
		}
	}
	who := f.GetNamespace()
	if who == "" {
		who = "request"
	}
	return fmt.Sprintf("%s: %s %s (%s): %s", who, f.GetCategory(), f.GetErrorCode(), retry, f.GetMessage())
}

// clip shortens s to at most n characters (not bytes), so multi-byte text stays valid.
func clip(s string, n int) string {
	r := []rune(strings.ReplaceAll(s, "\n", " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n]) + "…"
}
