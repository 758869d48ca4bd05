"""`reachstore query NS[,NS...] "question"`: the merged results, then one line that says
how complete they are and, for every namespace missing, why and whether to retry."""

from __future__ import annotations

import argparse

from reachstore import Client, QueryMeta, SearchResponse
from reachstore_server.cli_client import exit_codes
from reachstore_server.cli_client.connection import client_command, positive_int, wrapped
from reachstore_server.cli_client.output import clean, print_json, retry_advice, say, shorten

SNIPPET_CHARS = 160


def coverage_line(meta: QueryMeta) -> str:
    """``coverage 2/3 namespaces — missing: slow (timeout NAMESPACE_TIMEOUT, retry after
    1000 ms)``: the count first, so the line reads the same whatever is missing."""
    answered, asked = len(meta.namespaces_succeeded), len(meta.namespaces_queried)
    line = f"coverage {answered}/{asked} namespaces"
    if not meta.namespaces_failed:
        return f"{line} — complete"
    missing = ", ".join(
        f"{clean(f.namespace)} ({f.category} {f.error_code}, {retry_advice(f)})"
        for f in meta.namespaces_failed
    )
    return f"{line} — missing: {missing}"


def print_results(response: SearchResponse) -> None:
    if not response.results:
        say("no results")
    for rank, result in enumerate(response.results, 1):
        say(
            f"{rank:>2}. {result.score:.4f}  {clean(result.namespace)}  "
            f"{clean(result.document_id)} #{result.chunk_index}"
        )
        say(f"    {shorten(result.text, SNIPPET_CHARS)}")
    say(coverage_line(response.meta))


def cmd_query(args: argparse.Namespace, client: Client) -> int:
    namespaces = [name.strip() for name in args.namespaces.split(",") if name.strip()]
    response = client.search(
        namespaces, args.question, top_k=args.top_k, timeout_ms=args.timeout_ms
    )
    if args.json:
        print_json(response)
    else:
        print_results(response)
    meta = response.meta
    return exit_codes.outcome(len(meta.namespaces_succeeded), len(meta.namespaces_failed))


def add_query_parser(
    commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]
) -> None:
    query = commands.add_parser(
        "query",
        parents=parents,
        help="search namespaces; prints results and what is missing from them",
        description=wrapped(
            "Searches one or more namespaces at once. A namespace that fails does "
            "not fail the query: the results of the others are printed, then a coverage line "
            "names each missing namespace with its category and retry advice."
        ),
        epilog=exit_codes.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    query.add_argument("namespaces", metavar="NS[,NS...]", help="comma-separated namespaces")
    query.add_argument("question", help="the question, in any language")
    query.add_argument("--top-k", type=positive_int, default=10, help="results (1-100; 10)")
    query.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=None,
        help="the server's time budget per namespace (default 2000, at most 10000); a "
        "namespace over it is reported missing (timeout, retryable)",
    )
    query.set_defaults(func=client_command(cmd_query))
