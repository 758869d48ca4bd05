"""The executor's group commit under SIGKILL: many actions' state changes share one
transaction (``reachstore_server/reach/executor.py`` ``GroupCommit``, ``ReachStore.settle_many``),
and a kill at any moment leaves each of them whole or not at all.

Real ``python -m reachstore_server.reach.main`` processes killed with SIGKILL while they work, a
real HTTP receiver, and SQL on the database afterwards: for every action, the history,
the audit events waiting in the outbox (no audit service runs, so they all stay there)
and the row itself must tell the same story.
"""

from __future__ import annotations

import collections
import json
import random
import time
from pathlib import Path

import pytest
import sqlalchemy

from tests.e2e.test_reach_crash import (
    OPEN,
    PG_MARKED,
    ReachProcess,
    SlowReceiver,
    crash_task,
    stored_states,
    wait_until_quiet,
    write_config,
)

pytestmark = pytest.mark.e2e

TASKS = 40  # six actions each, two channels, dependants: many changes at once
KILLS = 3

Transitions = collections.Counter[tuple[str, str]]


def history_by_action(conn: sqlalchemy.Connection) -> dict[str, list[tuple[str, str]]]:
    """(from, to) of every history entry of every action, in the order written."""
    rows = conn.execute(
        sqlalchemy.text(
            "SELECT a.idem_key, h.from_state, h.to_state FROM reach_history h "
            "JOIN reach_actions a ON a.action_id = h.action_id ORDER BY h.id"
        )
    )
    found: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for key, before, after in rows:
        found[key].append((before, after))
    return found


def changes_in_events(conn: sqlalchemy.Connection) -> dict[str, Transitions]:
    """The state changes the audit events in the outbox describe, by idempotency key."""
    found: dict[str, Transitions] = collections.defaultdict(collections.Counter)
    for (text,) in conn.execute(
        sqlalchemy.text("SELECT event_json FROM audit_outbox WHERE service = 'reach'")
    ):
        event = json.loads(text)
        if not event["method"].startswith("action."):
            continue  # a call's event (SubmitTask), not an action's
        before, after = event["params"]["from_state"], event["result_status"]
        if before != after:
            found[event["idempotency_key"]][(before, after)] += 1
    return found


def shared_transactions(conn: sqlalchemy.Connection) -> int:
    """Moments at which the history of actions of two or more tasks was written: one
    transaction writes one timestamp, so these are group commits of several actions."""
    rows = conn.execute(
        sqlalchemy.text(
            "SELECT h.at FROM reach_history h JOIN reach_actions a ON a.action_id = h.action_id "
            "WHERE h.reason <> 'reserved' GROUP BY h.at HAVING COUNT(DISTINCT a.task_id) > 1"
        )
    )
    return len(rows.all())


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_a_kill_mid_group_commit_leaves_every_change_whole(
    tmp_path: Path, database_url: str
) -> None:
    """SIGKILL the reach process at random moments while 240 actions move through it,
    restart it each time. Afterwards, from the database: several actions' changes did
    share transactions; every state change in an action's history has its audit event
    in the outbox and no event lacks its history entry; each row's state is the last
    state its history names."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    engine = sqlalchemy.create_engine(database_url)
    receiver = SlowReceiver((0.05, 0.2), dedupe=True)
    config = tmp_path / "reach.toml"
    procs: list[ReachProcess] = []
    log = [f"group commit under kills on {engine.dialect.name}, seed {seed}"]

    def launch() -> ReachProcess:
        process = ReachProcess(tmp_path, database_url, config, f"group-{len(procs)}")
        procs.append(process)
        return process.start()

    try:
        with receiver:
            write_config(config, receiver, workers=16, lease_s=2)
            current = launch()
            for n in range(TASKS):
                current.stub.SubmitTask(crash_task(n), timeout=10)
            for kill in range(1, KILLS + 1):
                if not OPEN & stored_states(engine).keys():
                    log.append(f"kill {kill}: skipped, no work left")
                    break
                receiver.wait_for(receiver.total() + 1, timeout=3)
                pause = rng.uniform(0.05, 0.5)
                time.sleep(pause)
                current.kill()
                log.append(f"kill {kill}, {pause:.2f} s after a delivery")
                current = launch()
            wait_until_quiet(current.stub, timeout=60)
            current.stop()
        with engine.connect() as conn:
            history = history_by_action(conn)
            events = changes_in_events(conn)
            shared = shared_transactions(conn)
            states = dict(
                conn.execute(sqlalchemy.text("SELECT idem_key, state FROM reach_actions")).all()
            )
    finally:
        for process in procs:
            process.stop()
        engine.dispose()

    missing_events, events_without_history, wrong_state = [], [], []
    for key, entries in history.items():
        changes: Transitions = collections.Counter(
            (before, after) for before, after in entries if before and before != after
        )
        told = events.get(key, collections.Counter())
        if changes - told:
            missing_events.append(f"{key}: {dict(changes - told)}")
        if told - changes:
            events_without_history.append(f"{key}: {dict(told - changes)}")
        if entries[-1][1] != states[key]:
            wrong_state.append(f"{key}: history ends {entries[-1][1]}, row {states[key]}")
    log.append(
        f"{len(states)} actions, {sum(len(e) for e in history.values())} history entries, "
        f"{sum(sum(c.values()) for c in events.values())} action events in the outbox, "
        f"{shared} transactions that carried changes of several tasks"
    )
    summary = "\n".join(log)
    print(summary)

    assert len(states) == TASKS * 6 and set(history) == set(states), summary
    assert shared, f"{summary}\nno transaction carried several actions: not a group commit"
    assert not missing_events, f"{summary}\nchanges without their audit event: {missing_events}"
    assert not events_without_history, (
        f"{summary}\naudit events of changes not in the history: {events_without_history}"
    )
    assert not wrong_state, f"{summary}\nrows that disagree with their history: {wrong_state}"
