"""The options every client command shares (where the system is, the key, the deadline,
``--json``) and the one place that turns what a command raises into an exit code."""

from __future__ import annotations

import argparse
import functools
import textwrap
from collections.abc import Callable

from reachstore import Client, ReachstoreError
from reachstore_server.cli_client import exit_codes
from reachstore_server.cli_client.output import error_line, note, print_json

DEFAULT_TIMEOUT_S = 30.0


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of 1 or more, got {text!r}")
    return value


HELP_WIDTH = 88


def wrapped(text: str) -> str:
    """A description pre-wrapped: the help keeps the exit-code table as written, so it
    cannot wrap the description itself."""
    return textwrap.fill(" ".join(text.split()), HELP_WIDTH)


def shared_options() -> argparse.ArgumentParser:
    """A parent parser: its options appear on every client command."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("connection and output")
    group.add_argument("--host", default="127.0.0.1", help="where `reachstore up` listens")
    group.add_argument(
        "--grpc-port-base",
        type=int,
        default=50051,
        help="the base port of `reachstore up` (query; ingest +1, reach +2)",
    )
    group.add_argument(
        "--api-key",
        default=None,
        help="the API key (default: $REACHSTORE_API_KEY; none for a local development system)",
    )
    group.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each call may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout and nothing else there (progress and "
        "errors still go to stderr)",
    )
    return parser


def connect(args: argparse.Namespace) -> Client:
    # The SDK falls back to $REACHSTORE_API_KEY itself when no key is passed.
    return Client.local(
        args.host, args.grpc_port_base, timeout=args.timeout, api_key=args.api_key or None
    )


Command = Callable[[argparse.Namespace, Client], int]


def client_command(command: Command) -> Callable[[argparse.Namespace], int]:
    """Runs ``command`` with a connected client and maps what escapes it to an exit code:
    a refused request is one stderr line (and, with --json, ``{"error": ...}`` on stdout,
    the REST API's shape), a usage problem exits 2, Ctrl-C 130."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            with connect(args) as client:
                return command(args, client)
        except ReachstoreError as exc:
            if args.json:
                print_json({"error": exc.failure})
            note(error_line(exc))
            return exit_codes.FAILED
        except exit_codes.UsageError as exc:
            note(str(exc))
            return exit_codes.USAGE
        except KeyboardInterrupt:
            note("interrupted")
            return exit_codes.INTERRUPTED

    return run
