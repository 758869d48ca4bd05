"""Admission: a service serves a bounded number of calls at once and refuses, at once, what
it cannot serve in time (docs/OPERATIONS.md, "Load shedding").

Without a bound, a burst beyond capacity queues inside the process (for the search
threads, the database pool, the interpreter) until every caller's deadline has run out:
the service keeps working at full speed on answers nobody waits for any more, and the
backlog outlives the burst. With it, a call waits for a slot only as long as it could
still be served, and otherwise gets ``SERVICE_OVERLOADED`` (transient) with a wait derived
from the backlog, so a well-behaved client spreads its retries over the time the backlog
takes to drain.

Reads go first: when a slot frees, a waiting read takes it before a waiting write, so
queries keep being answered while new ingest waits or is refused. Long polls (requests
with a ``wait_ms``) are not admitted here: they hold no worker while they wait.

The wait a caller is told, and the wait a call may queue, come from one estimate: with
``limit`` calls in flight taking ``mean`` seconds each, the service finishes
``limit / mean`` calls a second (Little's law), so the ``n``-th call in line starts after
about ``n * mean / limit`` seconds. The mean is a moving average of the calls served, so
the estimate follows what the calls cost now, including their waits for threads inside
the service.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Literal

from reachstore_server.common import errors

Kind = Literal["read", "write"]

# Weight of the newest call in the moving average of service times: about the last 10
# calls count, so the estimate follows a change of load within a second or so.
_NEWEST_WEIGHT = 0.1
# Before any call has been timed, the mean is taken as this (a query's order of magnitude);
# the first call timed replaces it.
_FIRST_GUESS_S = 0.05
# The shortest wait a refusal advises: sooner than this, the retry finds the same backlog.
_MIN_RETRY_S = 0.1


@dataclasses.dataclass(frozen=True)
class AdmissionLimits:
    """``concurrency``: calls served at once. ``max_wait_s``: the longest a call waits for
    a slot (less when its deadline is nearer)."""

    concurrency: int = 16
    max_wait_s: float = 1.0


# What a service runs with when nothing else is configured (config.py's defaults agree).
DEFAULT_LIMITS = AdmissionLimits()


@dataclasses.dataclass
class Ticket:
    """One admitted call; hand it back to ``Admission.leave`` when the call ends."""

    started: float


class Admission:
    """The bound of one process's calls, shared by all its methods."""

    def __init__(
        self, limits: AdmissionLimits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limits = limits
        self._clock = clock
        self._in_flight = 0
        self._mean_s = _FIRST_GUESS_S
        self._timed = False
        self._waiting: dict[Kind, collections.deque[asyncio.Future[Ticket]]] = {
            "read": collections.deque(),
            "write": collections.deque(),
        }

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiting["read"]) + len(self._waiting["write"])

    async def enter(self, kind: Kind, time_remaining: float | None) -> Ticket:
        """A slot for one call, now or after a wait it can afford; otherwise
        ``ReachstoreError(SERVICE_OVERLOADED)`` at once, or when the affordable wait is over.
        ``time_remaining``: seconds to the caller's deadline (None: no deadline)."""
        limit = self._limits.concurrency
        ahead = len(self._waiting["read"]) + (len(self._waiting["write"]) if kind == "write" else 0)
        if self._in_flight < limit and ahead == 0:
            self._in_flight += 1
            return Ticket(self._clock())
        # The call must start in time to be served before its deadline.
        affordable = self._limits.max_wait_s
        if time_remaining is not None:
            affordable = min(affordable, time_remaining - self._mean_s)
        expected = math.ceil((ahead + 1) / limit) * self._mean_s
        if expected > affordable:
            raise self._refusal()
        slot: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        self._waiting[kind].append(slot)
        try:
            return await asyncio.wait_for(asyncio.shield(slot), max(affordable, 0.0))
        except (TimeoutError, asyncio.CancelledError) as exc:
            if slot.done():
                # The slot was handed over just as the wait ended: pass it on.
                self.leave(slot.result(), served=False)
            else:
                self._waiting[kind].remove(slot)
                slot.cancel()
            if isinstance(exc, TimeoutError):
                raise self._refusal() from None
            raise

    def leave(self, ticket: Ticket, served: bool = True) -> None:
        """The call of ``ticket`` ended: its time joins the mean (unless it was never
        served), its slot goes to the next waiting read, else the next waiting write."""
        now = self._clock()
        if served:
            took = max(now - ticket.started, 0.0)
            weight = _NEWEST_WEIGHT if self._timed else 1.0
            self._mean_s += weight * (took - self._mean_s)
            self._timed = True
        for kind in ("read", "write"):
            queue = self._waiting[kind]
            while queue:
                slot = queue.popleft()
                if not slot.done():
                    slot.set_result(Ticket(now))  # the slot passes on: in_flight unchanged
                    return
        self._in_flight -= 1

    def _refusal(self) -> errors.ReachstoreError:
        backlog = self._in_flight + self.waiting
        drain_s = max(backlog / self._limits.concurrency * self._mean_s, _MIN_RETRY_S)
        return errors.ReachstoreError(
            errors.SERVICE_OVERLOADED,
            f"the service is serving {self._in_flight} calls with {self.waiting} waiting; "
            f"retry in {drain_s:.3f} s",
            retry_after_ms=math.ceil(round(drain_s * 1000, 3)),
            structured_data={
                "in_flight": self._in_flight,
                "waiting": self.waiting,
                "limit": self._limits.concurrency,
                "mean_call_ms": round(self._mean_s * 1000, 1),
            },
        )
