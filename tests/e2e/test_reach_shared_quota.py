"""A channel's quota holds for the whole deployment, not per worker: two reach processes
on one PostgreSQL database, one channel with a declared quota, and the receiver's clock
says how fast the sends arrived."""

from __future__ import annotations

from pathlib import Path

import pytest

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.test_reach_crash import ReachProcess, action_spec, wait_until_quiet
from tests.reach.peers import HttpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

QUOTA = 10.0  # declared by the provider; reachstore sends at 70 % of it
RATE = QUOTA * 0.7
ACTIONS = 36


def test_two_workers_together_keep_to_the_channel_rate(tmp_path: Path, pg_database: str) -> None:
    config = tmp_path / "reach.toml"
    workers = [ReachProcess(tmp_path, pg_database, config, f"quota-worker-{i}") for i in (1, 2)]
    with HttpReceiver() as receiver:
        config.write_text(
            f"""
[channels.limited]
kind = "webhook"
description = "a provider that allows {QUOTA:g} requests per second"
action_types = ["notify"]
quota_per_second = {QUOTA}

[channels.limited.webhook]
url = "{receiver.url}"
""",
            encoding="utf-8",
        )
        try:
            for worker in workers:
                worker.start()
            for n in range(ACTIONS):
                workers[n % 2].stub.SubmitTask(
                    pb.SubmitTaskRequest(
                        entity_id=f"E-{n}", actions=[action_spec("a", "limited", {"n": n})]
                    ),
                    timeout=10,
                )
            wait_until_quiet(workers[0].stub, timeout=60)
            arrivals = sorted(r.at for r in receiver.records)
            senders = {
                w.worker_id: sum(1 for _, state, _ in w.transitions() if state == "succeeded")
                for w in workers
            }
        finally:
            for worker in workers:
                worker.stop()
    span = arrivals[-1] - arrivals[0]
    observed = (len(arrivals) - 1) / span
    summary = (
        f"{ACTIONS} actions over 2 workers on a channel limited to {RATE:g}/s: "
        f"{len(arrivals)} arrived in {span:.2f} s = {observed:.2f}/s; sent per worker {senders}"
    )
    print(summary)
    assert len(arrivals) == ACTIONS, summary
    assert all(senders.values()), summary  # both workers sent
    # The bucket starts with one token; after it, no faster than the rate (10 % for the
    # receiver's and the workers' clocks and scheduling). Two per-process buckets would
    # show about twice the rate.
    assert observed <= RATE * 1.1, summary
