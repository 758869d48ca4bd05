"""Alert baselines against the history the store actually keeps
(reachstore_server/reach/baseline.py, config.py, dedupe_archive.py).

Attack: ``[engine.baseline] days`` may be up to 28, while
``engine.dedupe_retention_days`` may be as low as 14, and the dedupe archive deletes a
finished task's actions and history from the live tables after the retention. baseline.py
claims "every action stays live for at least MIN_RETENTION_DAYS (14) ... longer than the
days a judgement reads". With days = 28 and the retention at 14, the config is accepted,
and the judgement silently reads only the days the archive left: the baseline is not the
last ``days`` days. Guarantee: a configuration whose baseline reads further back than the
live rows are kept is refused, or the judgement still sees every one of the ``days`` days.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from sqlalchemy import insert

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import baseline as bl
from reachstore_server.reach.config import parse_config
from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.reach_models import ReachActionRow, ReachHistoryRow, ReachTaskRow

TENANT = "acme"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def _rows(day: int, i: int) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    done = NOW - dt.timedelta(days=day, minutes=5 + i)
    created = done - dt.timedelta(milliseconds=150)
    task_id, action_id = uuid.uuid4().hex, uuid.uuid4().hex
    task = {
        "task_id": task_id, "tenant": TENANT, "entity_id": f"e-{day}-{i}", "caller_key": None,
        "request_digest": "0" * 64, "logical_time": created, "trace_id": "0" * 32,
        "submitted_by": "", "state": "succeeded", "version": 3, "created_at": created,
        "updated_at": done, "finished_at": done,
    }  # fmt: skip
    action = {
        "action_id": action_id, "task_id": task_id, "tenant": TENANT, "position": 0,
        "name": "a", "channel": "hook", "action_type": "notify", "params_json": "{}",
        "depends_on_json": "[]", "required": True, "idem_key": f"synthetic/{action_id}",
        "window": "-", "state": "succeeded", "attempts": 1, "rate_limited": 0, "polls": 0,
        "unknown_polls": 0, "ambiguous_sends": 0, "next_at": None, "lease_owner": "",
        "first_sent_at": None, "accepted_at": None, "external_id": "", "failure_json": "",
        "failure_kind": "", "resolution_json": "", "created_at": created, "updated_at": done,
        "finished_at": done,
    }  # fmt: skip
    history = [
        {"tenant": TENANT, "action_id": action_id, "at": at, "from_state": a, "to_state": b,
         "reason": "synthetic", "details_json": "{}"}
        for at, a, b in ((created, "ready", "submitting"), (done, "submitting", "succeeded"))
    ]  # fmt: skip
    return task, action, history


def _config(days: int) -> dict[str, Any]:
    return {
        "engine": {
            "dedupe_retention_days": 14,
            "baseline": {"days": days, "min_samples": 3, "min_history_days": 3},
        },
        "channels": {
            "hook": {
                "kind": "webhook",
                "description": "hook",
                "action_types": ["notify"],
                "webhook": {"url": "http://127.0.0.1:9/"},
            }
        },
    }


def test_a_baseline_longer_than_the_retention_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"engine\.baseline\.days.*dedupe_retention_days"):
        parse_config(_config(28))
    with pytest.raises(ConfigError, match=r"engine\.baseline\.days"):
        parse_config(_config(14))


def test_the_longest_baseline_allowed_judges_on_every_day_after_the_archive_sweep(
    store: ReachStore,
) -> None:
    config = parse_config(_config(13))
    policy = config.baseline
    tasks, actions, history = [], [], []
    for day in range(policy.days + 1):
        for i in range(5):
            t, a, h = _rows(day, i)
            tasks.append(t)
            actions.append(a)
            history += h
    with store._engine.begin() as conn:  # noqa: SLF001 - synthetic history, as the e2e tests
        conn.execute(insert(ReachTaskRow.__table__), tasks)
        conn.execute(insert(ReachActionRow.__table__), actions)
        conn.execute(insert(ReachHistoryRow.__table__), history)
    before = bl.judge(NOW, policy, *store.baseline_rows(bl.history_start(NOW, policy)))
    assert {j.history_days for j in before} == {policy.days}
    # The service's archive sweep, by the service's own rule (the retention of the config).
    while store.archive_expired(NOW, config.dedupe_retention_days).tasks:
        pass
    after = bl.judge(NOW, policy, *store.baseline_rows(bl.history_start(NOW, policy)))
    days = {j.history_days for j in after}
    assert days == {policy.days}, (
        f"engine.baseline.days = {policy.days} with dedupe_retention_days = "
        f"{config.dedupe_retention_days}; after the archive sweep the baseline reads "
        f"{days} day(s) of history"
    )
