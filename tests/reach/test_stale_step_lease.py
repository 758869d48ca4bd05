"""A step that stalled past its lease must not act under a lease claimed later.

Process A claims an action and stalls right before marking it SUBMITTING (a SIGSTOP, a long
pause). Its lease runs out; process B takes the action over, marks it, delivers it and is
killed before recording the answer. B's lease runs out too, and A's own claim loop claims
the action again while A's stalled step is still under way. If that step then acted under
the new lease, it would mark and send a second time: a non-idempotent webhook delivered
twice. A is a real Executor with the real store, channel and HTTP receiver; the stall is a
gate in front of its mark; B is the footprint of a killed process (its claim, its mark, one
POST). Found by an attack on the reach layer; the same in real processes is two reach
services, one SIGSTOPped after its claim and SIGCONTed after the other was."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy
from prometheus_client import CollectorRegistry

from reachstore_server.common.pii import Masker
from reachstore_server.reach import states as st
from reachstore_server.reach.config import load_config
from reachstore_server.reach.executor import Executor
from reachstore_server.reach.main import build_channels
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.store import ActionPlan, Change, Claim, ReachStore, TaskPlan
from reachstore_server.reach.watch import TaskChanges
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.test_reach_crash import PG_MARKED, PLAIN, write_config
from tests.reach.peers import HttpReceiver

LEASE_S = 2.0


def _plan() -> TaskPlan:
    action = ActionPlan(
        "p0", PLAIN, "notify", {"x": 1}, (), True, "key-" + secrets.token_hex(8), "day"
    )
    return TaskPlan(
        tenant="local",
        entity_id="e1",
        caller_key=None,
        request_digest="0" * 64,
        logical_time=dt.datetime.now(dt.UTC),
        trace_id=secrets.token_hex(16),
        submitted_by="",
        actions=(action,),
    )


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_a_stalled_step_does_not_send_under_a_later_claim(
    tmp_path: Path, database_url: str
) -> None:
    asyncio.run(_run(tmp_path, database_url))


async def _run(tmp_path: Path, database_url: str) -> None:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    masker = Masker(b"k" * 32, persistent=False)
    store = ReachStore(make_sessions(engine), masker)
    receiver = HttpReceiver().start()
    channels: dict[str, Any] = {}
    try:
        config = load_config(
            write_config(tmp_path / "reach.toml", receiver, workers=4, lease_s=LEASE_S)
        )
        channels = build_channels(config)
        for channel in channels.values():
            await channel.start()
        executor = Executor(
            store,
            config,
            channels,
            lambda s: masker.bounded_answer(s, 512),
            ReachMetrics(CollectorRegistry()),
            "A",
            TaskChanges(),
        )
        gate = asyncio.Event()
        mark = executor._mark_sending

        async def stalled(claim: Claim, *args: Any) -> Any:  # A stops right before its mark
            await gate.wait()
            return await mark(claim, *args)

        executor._mark_sending = stalled  # type: ignore[method-assign]
        action_id = store.reserve(_plan()).actions[0].action_id
        stop = asyncio.Event()
        runner = asyncio.create_task(executor.run(stop))

        def row() -> Any:
            with engine.connect() as connection:
                return connection.execute(
                    sqlalchemy.text(
                        "SELECT state, lease_owner FROM reach_actions WHERE action_id = :a"
                    ),
                    {"a": action_id},
                ).one()

        while not (row().lease_owner or "").startswith("A:"):
            await asyncio.sleep(0.05)
        # B takes the action over once A's lease has run out, marks it, delivers it, dies.
        claim_b = None
        deadline = time.monotonic() + 15
        while claim_b is None and time.monotonic() < deadline:
            claims = await asyncio.to_thread(store.claim, "B", 10, LEASE_S)
            claim_b = next((c for c in claims if c.action_id == action_id), None)
            await asyncio.sleep(0.01)
        assert claim_b is not None, "B never got the action"
        sending = Change(
            st.SUBMITTING,
            "sending",
            {"attempt": 1},
            due_in=LEASE_S,
            keep_lease=True,
            live_lease=True,
        )
        assert (await asyncio.to_thread(store.settle, claim_b, sending)).applied
        async with httpx.AsyncClient() as http:
            await http.post(
                f"{receiver.base_url}/{PLAIN}",
                json={"from": "B"},
                headers={"X-Reachstore-Action-Id": action_id},
            )
        # A's claim loop takes the SUBMITTING action once B's lease has run out.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = row()
            if now.state == st.SUBMITTING and (now.lease_owner or "").startswith("A:"):
                break
            await asyncio.sleep(0.02)
        gate.set()  # A's stalled step goes on
        await asyncio.sleep(2 * LEASE_S)
        stop.set()
        await runner
        deliveries = receiver.deliveries_by("X-Reachstore-Action-Id")[action_id]
        assert deliveries == 1, (action_id, deliveries, row())
    finally:
        for channel in channels.values():
            await channel.close()
        receiver.stop()
        engine.dispose()
