"""Red team: a worker id of 63 characters or more (``REACHSTORE_WORKER_ID`` is taken as
given, with no limit) cuts the random part off every lease token, so the lease fence no
longer tells one claim from the next.

``ReachStore.claim`` makes the token ``f"{worker}:{secrets.token_hex(6)}"[:64]``: with a
64-character worker id it is the id itself, the same for every claim that worker (and any
other process given the same id) ever makes. A claim that lost its lease, to a newer claim
of the same action, still passes ``settle``'s fence (``lease_owner == claim.lease``) and
overwrites what the new owner is doing: a stale "give it back" (``rate_limit_wait``,
``lease_too_short_to_send``) returns an action to READY while its new owner is sending
it, so it is sent again; a stale mark even passes ``live_lease`` on the lease the new
owner renewed. The documented rule "``settle`` only changes a row that still carries that
token, so a worker that lost its lease ... cannot overwrite newer news" is gone.

Nothing in the configuration refuses such an id (``reachstore_server/common/config.py``).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from reachstore_server.reach import states as st
from reachstore_server.reach.store import ActionPlan, Change, ReachStore, TaskPlan

# A Kubernetes-style name: 63 characters is the usual limit of a DNS label.
LONG_ID = "reachstore-reach-production-eu-west-1-blue-7d9f8b6c5d-x2k9p-abc"


def _reserve(store: ReachStore) -> None:
    store.reserve(
        TaskPlan(
            tenant="t1",
            entity_id="WO-1",
            caller_key=None,
            request_digest="d1",
            logical_time=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
            trace_id="0" * 32,
            submitted_by="",
            actions=(ActionPlan("a", "hook", "notify", {"n": 1}, (), True, "k-a", "-"),),
        )
    )


@pytest.mark.parametrize("worker", [LONG_ID, LONG_ID + "-replica-2"])
def test_a_claim_that_lost_its_lease_is_fenced_out_whatever_the_worker_id(
    store: ReachStore, worker: str
) -> None:
    assert len(LONG_ID) == 63
    _reserve(store)
    stale = store.claim(worker, 1, 0.3)[0]
    time.sleep(0.4)  # its lease runs out (the worker stalled: paused, starved, waiting)
    current = store.claim(worker, 1, 60)[0]  # the action is taken up again
    mark = Change(st.SUBMITTING, "sending", due_in=60, keep_lease=True, live_lease=True)
    assert store.settle(current, mark).applied  # the new owner is sending it now

    # The stale claim comes back and gives the action back to the queue.
    back = store.settle(stale, Change(st.READY, "rate_limit_wait", due_in=0.0))

    assert not back.applied, (
        f"a claim that lost its lease overwrote the new owner's send (both claims hold the "
        f"token {stale.lease!r})"
    )
