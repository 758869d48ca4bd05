"""How far behind reach is, per channel: the age of its oldest due action, as the metric
``reachstore_reach_behind_seconds`` reports it (docs/OPERATIONS.md, "Load shedding")."""

from __future__ import annotations

import dataclasses
import secrets

import pytest
import sqlalchemy
from prometheus_client import CollectorRegistry, generate_latest

from reachstore_server.common.pii import Masker
from reachstore_server.reach.metrics import ReachMetrics
from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.schema import migrate_to_head
from tests.e2e.test_reach_crash import PG_MARKED
from tests.reach.test_stale_step_lease import _plan


@pytest.mark.parametrize("database_url", PG_MARKED, indirect=True)
def test_the_oldest_due_action_of_each_channel_says_how_far_behind_it_is(
    database_url: str,
) -> None:
    engine = make_engine(database_url)
    migrate_to_head(engine)
    store = ReachStore(make_sessions(engine), Masker(b"k" * 32, persistent=False))
    assert store.behind_by_channel() == {}

    plan = _plan()
    late = store.reserve(plan).actions[0].action_id
    other = dataclasses.replace(
        plan.actions[0], channel="other-hook", idem_key="key-" + secrets.token_hex(8)
    )
    store.reserve(dataclasses.replace(plan, actions=(other,)))
    with engine.begin() as connection:  # the first fell 40 s behind
        connection.execute(
            sqlalchemy.text("UPDATE reach_actions SET next_at = next_at - 40 WHERE action_id = :a"),
            {"a": late},
        )
    behind = store.behind_by_channel()
    assert set(behind) == {plan.actions[0].channel, "other-hook"}
    assert 40 <= behind[plan.actions[0].channel] < 70  # due 40 s ago
    assert 0 <= behind["other-hook"] < 30

    metrics = ReachMetrics(CollectorRegistry())
    metrics.measure_lag_from(store.behind_by_channel)
    text = generate_latest(metrics.registry).decode()
    assert f'reachstore_reach_behind_seconds{{channel="{plan.actions[0].channel}"}} 4' in text

    # Claimed but not yet sent (a worker holding it while the channel's rate lets it wait),
    # an action still counts: by how long it has existed, though no longer due.
    claimed = store.claim("worker", 10, 30.0)
    assert {c.action_id for c in claimed} >= {late}
    assert set(store.behind_by_channel()) == {plan.actions[0].channel, "other-hook"}
    with engine.begin() as connection:  # once sent (attempted), only a due time counts
        connection.execute(sqlalchemy.text("UPDATE reach_actions SET attempts = 1"))
    assert store.behind_by_channel() == {}
    engine.dispose()
