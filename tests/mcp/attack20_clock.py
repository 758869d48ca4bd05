"""Runs `reachstore mcp` (its arguments after the first) with the clock its reach tools
derive idempotency keys from (``dt.datetime.now`` in reachstore_server/mcp/calls.py) read
from a file, the first argument: an ISO 8601 moment the test writes before each call. Only
that clock moves; the reach service and everything else keep real time."""

from __future__ import annotations

import datetime as dt
import sys
import types
from pathlib import Path

CLOCK = Path(sys.argv[1])


class _Clock(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
        return dt.datetime.fromisoformat(CLOCK.read_text().strip()).astimezone(tz)


def _run() -> None:
    from reachstore_server import cli
    from reachstore_server.mcp import calls

    calls.dt = types.SimpleNamespace(  # type: ignore[assignment]
        datetime=_Clock, UTC=dt.UTC, timedelta=dt.timedelta, date=dt.date
    )
    cli.main(sys.argv[2:])


if __name__ == "__main__":
    _run()
