"""The client commands of the `reachstore` command line — `query`, `ingest`, `tasks`,
`reach` — which talk to a running system through the Python SDK, as any program would.

Each has the shared connection options, ``--json`` and the exit codes of ``exit_codes``.
"""

from __future__ import annotations

import argparse

from reachstore_server.cli_client.connection import shared_options
from reachstore_server.cli_client.ingest import add_ingest_parser
from reachstore_server.cli_client.query import add_query_parser
from reachstore_server.cli_client.reach import add_reach_parser
from reachstore_server.cli_client.tasks import add_tasks_parser

__all__ = ["add_client_parsers"]


def add_client_parsers(commands: argparse._SubParsersAction) -> None:
    parents = [shared_options()]
    add_query_parser(commands, parents)
    add_ingest_parser(commands, parents)
    add_tasks_parser(commands, parents)
    add_reach_parser(commands, parents)
