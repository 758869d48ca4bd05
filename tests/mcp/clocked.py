"""MCP reach tools with their clock in the test's hands: `reachstore mcp` over stdio whose
reach tools read the time from a file (tests/mcp/attack20_clock.py), and a call made now
written back in the database as made at another moment. The reach service keeps real
time; the rewritten rows hold exactly what they would had the call been made then (the
task's times, and the window part of each action's idempotency key,
reachstore_server/reach/idempotency.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from reachstore_server.reach.idempotency import window_bucket
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

LAUNCHER = Path(__file__).with_name("attack20_clock.py")


@contextlib.asynccontextmanager
async def clocked(system: RunningSystem, key: str, clock: Path) -> AsyncIterator[Client]:
    """`reachstore mcp` over stdio, its reach tools' clock read from ``clock``."""
    args = [str(LAUNCHER), str(clock), "mcp", "--grpc-port-base", str(system.grpc_port_base)]
    env = {**os.environ, "REACHSTORE_API_KEY": key}
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=env)) as c:
        yield c


def ticket_for(label: str) -> tuple[str, str]:
    """A ticket no other test sends, and the entity it is sent for."""
    ticket = f"{label}-{time.monotonic_ns()}"
    return ticket, f"customer-{ticket}"


def today_at(hour: int, minute: int, days_back: int = 0) -> dt.datetime:
    today = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days_back)
    return dt.datetime.combine(today, dt.time(hour, minute), dt.UTC)


async def send_at(
    client: Client, clock: Path, at: dt.datetime, tool: str, entity: str, ticket: str
) -> Any:
    """Calls ``tool`` with the clock at ``at``; its structured content."""
    clock.write_text(at.isoformat())
    result = await client.call_tool(
        tool, {"entity_id": entity, "params": {"ticket": ticket}, "wait_ms": 10_000}
    )
    assert result.is_error is False, result.content[0].text
    return result.structured_content


def _window_of_bucket(bucket: str) -> str:
    if bucket == "-":
        return "none"
    if "W" in bucket:
        return "week"
    return "hour" if "T" in bucket else "day"


def as_if_made_at(system: RunningSystem, task_ids: list[str], moment: dt.datetime) -> None:
    """Writes the tasks back as made at ``moment``: their times, and their actions' window
    bucket (the key's last part, idempotency.window_bucket) as of ``moment``."""
    stamp = moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    path = system.data_dir / "reachstore.db"
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn, conn:
        for task_id in task_ids:
            conn.execute(
                "UPDATE reach_tasks SET created_at = ?, logical_time = ?, updated_at = ?, "
                "finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE ? END "
                "WHERE task_id = ?",
                (stamp, stamp, stamp, stamp, task_id),
            )
            rows = conn.execute(
                "SELECT action_id, idem_key FROM reach_actions WHERE task_id = ?", (task_id,)
            ).fetchall()
            for action_id, idem_key in rows:
                head, bucket = idem_key.rsplit("/", 1)
                then = window_bucket(moment, _window_of_bucket(bucket))
                conn.execute(
                    "UPDATE reach_actions SET idem_key = ?, created_at = ?, updated_at = ?, "
                    "finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE ? END "
                    "WHERE action_id = ?",
                    (f"{head}/{then}", stamp, stamp, stamp, action_id),
                )


def wait_deliveries(receiver: HttpReceiver, ticket: str, at_least: int) -> int:
    """How many times ``ticket`` arrived, once ``at_least`` did or 5 s passed, and one
    more second for a copy on its way."""
    deadline = time.monotonic() + 5
    while receiver.deliveries_by_field("ticket")[ticket] < at_least:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    time.sleep(1)
    return receiver.deliveries_by_field("ticket")[ticket]
