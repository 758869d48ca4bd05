"""Admission's bookkeeping, with the clock in the test's hands (the service-level behaviour
is tests/e2e/test_load_shedding.py)."""

from __future__ import annotations

import asyncio

import pytest

from reachstore_server.common import errors
from reachstore_server.common.admission import Admission, AdmissionLimits, Ticket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _served(admission: Admission, clock: Clock, seconds: float) -> None:
    """One call served for ``seconds``, so the mean call time is known."""
    ticket = asyncio.run(admission.enter("m", "read", None))
    clock.now += seconds
    admission.leave(ticket)


def test_within_the_limit_calls_are_admitted_at_once() -> None:
    admission = Admission(AdmissionLimits(concurrency=2))

    async def run() -> None:
        first = await admission.enter("m", "read", 1.0)
        second = await admission.enter("m", "write", 1.0)
        assert admission.in_flight == 2
        admission.leave(first)
        admission.leave(second)
        assert admission.in_flight == 0

    asyncio.run(run())


def test_a_call_that_cannot_start_in_time_is_refused_at_once_with_the_backlog() -> None:
    clock = Clock()
    admission = Admission(AdmissionLimits(concurrency=2, max_wait_s=1.0), clock)
    _served(admission, clock, 0.25)

    async def run() -> None:
        held = [await admission.enter("m", "read", None) for _ in range(2)]
        # The n-th in line starts after (2 in flight + n ahead) x 0.25 s / 2 slots: the
        # seventh (n = 6) at 1.0 s, within the 1 s a call may wait.
        waiting = [asyncio.ensure_future(admission.enter("m", "read", 10.0)) for _ in range(7)]
        await asyncio.sleep(0)
        assert admission.waiting == 7
        with pytest.raises(errors.ReachstoreError) as refused:
            await admission.enter("m", "read", 10.0)  # the eighth: 1.125 s > 1 s
        failure = refused.value.failure
        assert failure.error_code == "SERVICE_OVERLOADED"
        # 2 in flight + 7 waiting, 2 at a time, 0.25 s each: the backlog drains in 1.125 s.
        assert failure.retry_after_ms == 1125
        # It names the bound, not how many calls the process (every tenant) has.
        assert dict(failure.structured_data) == {"limit": 2, "drain_ms": 1125.0}
        with pytest.raises(errors.ReachstoreError):
            await admission.enter("m", "read", 0.5)  # its deadline is nearer than its turn
        with pytest.raises(errors.ReachstoreError):
            await admission.enter("m", "read", 0.2)  # nearer than one such call takes
        assert admission.cost("m") == 0.25 and admission.cost("other") is None
        for future in waiting:  # callers that go away leave the line
            future.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert admission.waiting == 0
        for ticket in held:
            admission.leave(ticket)
        assert (admission.in_flight, admission.waiting) == (0, 0)

    asyncio.run(run())


def test_a_freed_slot_goes_to_a_waiting_read_before_an_earlier_write() -> None:
    clock = Clock()
    admission = Admission(AdmissionLimits(concurrency=1, max_wait_s=5.0), clock)
    _served(admission, clock, 0.1)
    order: list[str] = []

    async def call(kind: str) -> None:
        ticket = await admission.enter("m", kind, None)  # type: ignore[arg-type]
        order.append(kind)
        admission.leave(ticket)

    async def run() -> None:
        held = await admission.enter("m", "read", None)
        write = asyncio.ensure_future(call("write"))
        await asyncio.sleep(0)
        read = asyncio.ensure_future(call("read"))
        await asyncio.sleep(0)
        admission.leave(held)
        await asyncio.gather(write, read)

    asyncio.run(run())
    assert order == ["read", "write"]
    assert admission.in_flight == 0


def test_a_waiter_that_times_out_is_refused_and_leaves_no_trace() -> None:
    admission = Admission(AdmissionLimits(concurrency=1, max_wait_s=0.05))

    async def run() -> None:
        held = await admission.enter("m", "read", None)
        with pytest.raises(errors.ReachstoreError) as refused:
            await admission.enter("m", "read", None)
        assert refused.value.failure.error_code == "SERVICE_OVERLOADED"
        assert admission.waiting == 0
        admission.leave(held)
        assert admission.in_flight == 0

    asyncio.run(run())


def test_a_waiter_cancelled_as_its_slot_arrives_loses_no_slot() -> None:
    admission = Admission(AdmissionLimits(concurrency=1, max_wait_s=5.0))

    async def run() -> None:
        held = await admission.enter("m", "read", None)
        first = asyncio.ensure_future(admission.enter("m", "read", None))
        second = asyncio.ensure_future(admission.enter("m", "read", None))
        await asyncio.sleep(0)
        admission.leave(held)  # the slot is handed to `first` ...
        first.cancel()  # ... whose caller goes away before it runs
        [outcome] = await asyncio.gather(first, return_exceptions=True)
        if isinstance(outcome, Ticket):
            # The wait had ended with the slot: the call owns it and hands it back when it
            # ends, as the gRPC guard's `finally` does.
            admission.leave(outcome)
        else:
            assert isinstance(outcome, asyncio.CancelledError)
        ticket = await asyncio.wait_for(second, 1.0)  # the slot reached the next in line
        assert isinstance(ticket, Ticket)
        assert admission.in_flight == 1
        admission.leave(ticket)
        assert admission.in_flight == 0

    asyncio.run(run())


def test_a_method_timed_only_while_it_was_slow_is_forgotten_after_a_minute() -> None:
    """Calls refused as too slow for their deadlines are never timed, so without forgetting,
    a method timed only during a slow spell (a database failing over) stayed "too slow"
    for every deadline under that time, for good."""
    clock = Clock()
    admission = Admission(AdmissionLimits(concurrency=2), clock)
    _served(admission, clock, 30.0)

    async def run() -> None:
        with pytest.raises(errors.ReachstoreError) as refused:
            await admission.enter("m", "write", 10.0)
        assert "deadline is nearer" in refused.value.failure.message
        clock.now += 61.0
        assert admission.cost("m") is None
        admission.leave(await admission.enter("m", "write", 10.0))

    asyncio.run(run())
