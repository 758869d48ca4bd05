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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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
	var t tlsFlags
	flag.StringVar(&t.caFile, "tls-ca", os.Getenv("REACHSTORE_TLS_CA_FILE"), "PEM authorities the server's certificate is checked against; setting it (or -tls-cert) turns TLS on")
	flag.StringVar(&t.certFile, "tls-cert", os.Getenv("REACHSTORE_TLS_CERT_FILE"), "PEM client certificate, for a system that requires mutual TLS")
	flag.StringVar(&t.keyFile, "tls-key", os.Getenv("REACHSTORE_TLS_KEY_FILE"), "its PEM private key")
	flag.StringVar(&t.serverName, "tls-server-name", os.Getenv("REACHSTORE_TLS_SERVER_NAME"), "the name the server's certificate must carry, when it is not the host in -addr")
	flag.BoolVar(&t.on, "tls", false, "speak TLS, trusting the system's authorities unless -tls-ca says otherwise")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "usage: partialquery -addr HOST:PORT [-namespaces a,b] [-query TEXT]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	transport, err := t.dialOption()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := run(*addr, *apiKey, *timeout, transport, &queryv1.QueryRequest{
		Namespaces: strings.Split(*namespaces, ","),
		Query:      *question,
		TopK:       int32(*topK),
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// tlsFlags are the TLS settings, the same ones the services read from the environment.
type tlsFlags struct {
	on                                     bool
	caFile, certFile, keyFile, serverName string
}

// dialOption is plain text unless a TLS flag is given: a local `reachstore up` speaks plain
// text, one started with --tls-cert only TLS.
func (t tlsFlags) dialOption() (grpc.DialOption, error) {
	if !t.on && t.caFile == "" && t.certFile == "" {
		// grpc 1.33 has no credentials/insecure.
		return grpc.WithInsecure(), nil
	}
	config := &tls.Config{ServerName: t.serverName, MinVersion: tls.VersionTLS12}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca: %s holds no PEM certificate", t.caFile)
		}
	}
	if (t.certFile == "") != (t.keyFile == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	if t.certFile != "" {
		pair, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(config)), nil
}

func run(addr, apiKey string, timeout time.Duration, transport grpc.DialOption, req *queryv1.QueryRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if apiKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiKey)
	}
	conn, err := grpc.DialContext(ctx, addr, transport)
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
