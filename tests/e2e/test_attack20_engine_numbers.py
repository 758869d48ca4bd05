"""Attack on the reach engine's numeric settings, among them the dedupe retention
(``engine.dedupe_retention_days``, reachstore_server/reach/config.py): a bad value must stop
the reach service at start with an error naming the setting and its rule, never a Python
traceback, and never be taken.

TOML has ``inf`` and ``nan`` literals. ``dedupe_retention_days = inf`` or ``nan`` and
``workers = nan`` are turned into ints without a check (OverflowError / ValueError out of
``_number``); ``lease_s = nan`` passes ``lease_s < 2`` (every comparison with NaN is false)
and the check that each send fits in the lease, and the service serves with a lease of NaN
seconds — the lease is what keeps a second worker off an action whose send is in flight
(docs/AT_MOST_ONCE.md); an action submitted to it stays ``ready`` with 0 attempts and is
never sent, with no error anywhere (the second test). ``lease_s = inf`` is taken too, so an
action whose worker died would never be taken over.

A real reach process (ReachProcess of tests/e2e/test_reach_crash.py) per value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.redteam import describe, settle, submit
from tests.e2e.test_reach_crash import ReachProcess, state_name
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

CHANNEL = """
[channels.once]
kind = "webhook"
description = "once"
action_types = ["notify"]
[channels.once.webhook]
url = "{url}"
read_timeout_s = 1
"""


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dedupe_retention_days", "inf"),
        ("dedupe_retention_days", "nan"),
        ("workers", "nan"),
        ("lease_s", "nan"),
        ("lease_s", "inf"),
        ("dedupe_retention_days", "13"),  # control: refused, naming the setting
    ],
)
def test_a_non_finite_engine_setting_stops_the_start_naming_it(
    tmp_path: Path, key: str, value: str
) -> None:
    with HttpReceiver() as receiver:
        config = tmp_path / "reach.toml"
        config.write_text(f"[engine]\n{key} = {value}\n" + CHANNEL.format(url=receiver.url))
        reach = ReachProcess(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", config, "numbers")
        try:
            reach.start(timeout=40)
        except RuntimeError as exc:
            log = str(exc)
            assert "Traceback" not in log, f"engine.{key} = {value}: {log[-1500:]}"
            assert f"engine.{key}" in log, f"engine.{key} = {value}: {log[-1500:]}"
            return
        finally:
            reach.stop()
        pytest.fail(f"the reach service started and served with engine.{key} = {value}")


def test_a_service_that_starts_with_a_nan_lease_still_sends(tmp_path: Path) -> None:
    """What the service taking ``lease_s = nan`` means for an action: if it starts at all,
    an action submitted to it must still be sent."""
    with HttpReceiver() as receiver:
        config = tmp_path / "reach.toml"
        config.write_text("[engine]\nlease_s = nan\n" + CHANNEL.format(url=receiver.url))
        reach = ReachProcess(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", config, "nan-lease")
        try:
            try:
                reach.start(timeout=40)
            except RuntimeError:
                return  # refused at start: nothing is held
            reply = submit(reach.stub, "once", {"ticket": "N-1"})
            action = settle(reach.stub, reply.task.actions[0].action_id, 15)
        finally:
            reach.stop()
    assert state_name(action) == "succeeded" and receiver.total() == 1, (
        f"served with lease_s = nan, and the action was never sent "
        f"({receiver.total()} deliveries):\n{describe(action)}"
    )
