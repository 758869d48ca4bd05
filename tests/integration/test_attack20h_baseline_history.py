"""Alert baselines against the history the store actually keeps
(reachstore_server/reach/baseline.py, config.py, dedupe_archive.py).

Attack 1 (FAILS while broken): ``[engine.baseline] days`` may be up to 28, while
``engine.dedupe_retention_days`` may be as low as 14, and the dedupe archive deletes a
finished task's actions and history from the live tables after the retention. baseline.py
claims "every action stays live for at least MIN_RETENTION_DAYS (14) ... longer than the
days a judgement reads". With days = 28 and the retention at 14, the config is accepted,
and the judgement silently reads only the days the archive left: the baseline is not the
last ``days`` days. Guarantee: a configuration whose baseline reads further back than the
live rows are kept is refused, or the judgement still sees every one of the ``days`` days.

Controls (pass): pure ``baseline.judge`` statistics: a perfect channel's single failure is
noise and eight in 25 alert; a failure rate past halfway to 100 % alerts however wide the
history spread; skipped actions are no failures; an action re-entering UNKNOWN counts once.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from sqlalchemy import insert

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import baseline as bl
from reachstore_server.reach import states as st
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


CONFIG = {
    "engine": {
        "dedupe_retention_days": 14,
        "baseline": {"days": 28, "min_samples": 3, "min_history_days": 3},
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


def test_baseline_days_beyond_the_retention_judge_on_every_day(store: ReachStore) -> None:
    try:
        config = parse_config(CONFIG)
    except ConfigError as exc:  # refusing the combination keeps the guarantee
        assert "days" in str(exc) or "retention" in str(exc)
        return
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
        f"engine.baseline.days = {policy.days} accepted with dedupe_retention_days = "
        f"{config.dedupe_retention_days}; after the archive sweep the baseline reads "
        f"{days} day(s) of history"
    )


# --- controls: pure statistics ------------------------------------------------------------

T0 = dt.datetime(2026, 12, 6, 14, 30, tzinfo=dt.UTC)
POLICY = bl.BaselinePolicy()


def _hour(days_back: int, total: int, failed: int, kind: str = st.TECHNICAL) -> list[bl.Finished]:
    end = T0 - dt.timedelta(days=days_back)
    out = []
    for i in range(total):
        done = end - dt.timedelta(minutes=59 * (i + 1) / (total + 1))
        state = st.FAILED if i < failed else st.SUCCEEDED
        created = done - dt.timedelta(milliseconds=200)
        out.append(bl.Finished("t", "hook", created, done, state, kind))
    return out


def _judge(history: list[tuple[int, int]], now: tuple[int, int], **kw: Any) -> bl.Judgement:
    rows: list[bl.Finished] = []
    for day, (total, failed) in enumerate(history, 1):
        rows += _hour(day, total, failed)
    rows += _hour(0, *now)
    rows += kw.get("extra", [])
    [found] = [j for j in bl.judge(T0, POLICY, rows, []) if j.signal == bl.TECHNICAL_FAILURE_RATE]
    return found


@pytest.mark.parametrize(("failed", "alerting"), [(1, False), (8, True)])
def test_control_perfect_channel_noise_floor(failed: int, alerting: bool) -> None:
    judged = _judge([(25, 0)] * 7, (25, failed))
    assert judged.alerting is alerting, judged


def test_control_rate_past_halfway_alerts_despite_a_wide_spread() -> None:
    # Usual 20 %, very unsteady history: sigmas x deviation lies far above 100 %.
    judged = _judge([(100, f) for f in (0, 5, 20, 20, 20, 60, 80)], (100, 61))
    assert judged.threshold <= 0.6 + 1e-9 and judged.alerting, judged


def test_control_skipped_actions_are_no_failures() -> None:
    end = T0 - dt.timedelta(minutes=10)
    skipped = [bl.Finished("t", "hook", end, end, st.SKIPPED, st.TECHNICAL) for _ in range(200)]
    judged = _judge([(50, 0)] * 7, (50, 0), extra=skipped)
    assert judged.samples == 50 and not judged.alerting, judged


def test_control_unknown_reentries_count_once() -> None:
    entered: list[bl.Entered] = []
    for day in range(8):
        for i in range(40):
            at = T0 - dt.timedelta(days=day, minutes=50 - i)
            action = f"a-{day}-{i}"
            entered.append(bl.Entered("t", "hook", at, st.SUBMITTING, action))
            # On day 0 one action re-enters UNKNOWN twenty times (look-ups undecided).
            times = 20 if day == 0 and i == 0 else (1 if i == 0 else 0)
            for k in range(times):
                entered.append(
                    bl.Entered("t", "hook", at + dt.timedelta(seconds=k + 1), st.UNKNOWN, action)
                )
    [unknown] = [j for j in bl.judge(T0, POLICY, [], entered) if j.signal == bl.UNKNOWN_RATE]
    assert unknown.current == pytest.approx(1 / 40) and not unknown.alerting, unknown
