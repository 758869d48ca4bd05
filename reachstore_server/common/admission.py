"""Admission: a service serves a bounded number of calls at once and refuses, at once, what
it cannot serve in time (docs/OPERATIONS.md, "Load shedding").

Without a bound, a burst beyond capacity queues inside the process (for the search
threads, the database pool, the interpreter) until every caller's deadline has run out:
the service keeps working at full speed on answers nobody waits for any more, and the
backlog outlives the burst. With it, a call waits for a slot only as long as it could
still be served, and otherwise gets ``SERVICE_OVERLOADED`` (transient) with a wait derived
from the backlog, so a well-behaved client spreads its retries over the time the backlog
takes to drain.

Reads go first: when a slot frees, a waiting read takes it before a waiting call that adds
work (a document, an action, an audit event), so queries keep being answered while new
work waits or is refused.

What a call costs is estimated per method, as the median of its last ``_RECENT`` call
times within the last minute, not counting calls their callers abandoned (``grpc_server``):
a median, so a few slow calls (a heavy filter, a huge namespace) do not make every call of
the method look slow, and per method, so cheap look-ups do not make searches look cheap.
With calls in flight and waiting that cost ``c1, c2, ...`` and ``limit`` slots, a new call
starts after about ``(c1 + c2 + ...) / limit`` seconds. A call is refused at once
when that start leaves it less than its own cost before its deadline (or past the longest
wait allowed), and when its deadline is nearer than its cost even with a slot free; a call
that waited for its slot is checked again when it gets it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from typing import Literal

from reachstore_server.common import errors

Kind = Literal["read", "write"]

# Call times kept per method for its median: enough that a handful of outliers do not move
# it, few enough that it follows a change of load within a few dozen calls.
_RECENT = 32
# A call time older than this no longer counts: a method timed only while something was
# slow (a database failing over, a stalled disk) would otherwise look that slow for good,
# since calls refused as too slow for their deadlines are never timed to show it is over.
_FORGET_AFTER_S = 60.0
# The cost of a method never timed yet (a query's order of magnitude).
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

    method: str
    started: float


@dataclasses.dataclass
class _Waiter:
    method: str
    slot: asyncio.Future[Ticket]


class Admission:
    """The bound of one process's calls, shared by all its methods."""

    def __init__(
        self, limits: AdmissionLimits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limits = limits
        self._clock = clock
        self._served: list[Ticket] = []
        # Per method: (when the call ended, how long it took), oldest first.
        self._times: dict[str, collections.deque[tuple[float, float]]] = {}
        self._waiting: dict[Kind, collections.deque[_Waiter]] = {
            "read": collections.deque(),
            "write": collections.deque(),
        }

    @property
    def in_flight(self) -> int:
        return len(self._served)

    @property
    def waiting(self) -> int:
        return len(self._waiting["read"]) + len(self._waiting["write"])

    def cost(self, method: str) -> float | None:
        """The median time of the method's recent calls; None before its first, or when
        its last ended ``_FORGET_AFTER_S`` ago."""
        times = self._times.get(method)
        if not times:
            return None
        too_old = self._clock() - _FORGET_AFTER_S
        while times and times[0][0] < too_old:
            times.popleft()
        return statistics.median(took for _, took in times) if times else None

    async def enter(self, method: str, kind: Kind, time_remaining: float | None) -> Ticket:
        """A slot for one call of ``method``, now or after a wait it can afford; otherwise
        ``ReachstoreError(SERVICE_OVERLOADED)``, at once or when that wait is over.
        ``time_remaining``: seconds to the caller's deadline (None: no deadline)."""
        own = self.cost(method)
        if time_remaining is not None and own is not None and time_remaining < own:
            raise self._refusal("its deadline is nearer than such a call takes")
        ahead = list(self._waiting["read"])
        if kind == "write":
            ahead += self._waiting["write"]
        if len(self._served) < self._limits.concurrency and not ahead:
            return self._admit(method)
        affordable = self._limits.max_wait_s
        if time_remaining is not None:
            affordable = min(affordable, time_remaining - (own or 0.0))
        if self._start_in(ahead) > affordable:
            raise self._refusal("it could not start in time")
        waiter = _Waiter(method, asyncio.get_running_loop().create_future())
        self._waiting[kind].append(waiter)
        entered = self._clock()
        try:
            ticket = await asyncio.wait_for(asyncio.shield(waiter.slot), max(affordable, 0.0))
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.slot.done():
                # The slot was handed over just as the wait ended: pass it on.
                self.leave(waiter.slot.result(), served=False)
            else:
                self._waiting[kind].remove(waiter)
                waiter.slot.cancel()
            if isinstance(exc, TimeoutError):
                raise self._refusal("it waited as long as it could") from None
            raise
        # The wait took longer than foreseen: a call that can no longer finish in time
        # gives its slot straight back rather than hold it for an answer nobody will read.
        # Its cost is read again: the method may have been timed while it waited.
        own = self.cost(method)
        if time_remaining is not None and own is not None:
            if time_remaining - (self._clock() - entered) < own:
                self.leave(ticket, served=False)
                raise self._refusal("its deadline came too near while it waited")
        return ticket

    def leave(self, ticket: Ticket, served: bool = True) -> None:
        """The call of ``ticket`` ended: its time joins its method's (unless it was never
        served), its slot goes to the next waiting read, else the next waiting write."""
        now = self._clock()
        if served:
            times = self._times.setdefault(ticket.method, collections.deque(maxlen=_RECENT))
            times.append((now, max(now - ticket.started, 0.0)))
        self._served.remove(ticket)
        for kind in ("read", "write"):
            queue = self._waiting[kind]
            while queue:
                waiter = queue.popleft()
                if not waiter.slot.done():
                    waiter.slot.set_result(self._admit(waiter.method))
                    return

    def _admit(self, method: str) -> Ticket:
        ticket = Ticket(method, self._clock())
        self._served.append(ticket)
        return ticket

    def _cost_or_guess(self, method: str) -> float:
        cost = self.cost(method)
        return _FIRST_GUESS_S if cost is None else cost

    def _start_in(self, ahead: list[_Waiter]) -> float:
        """Seconds until a call behind ``ahead`` gets a slot: the work in flight and ahead
        of it, shared by the slots."""
        work = sum(self._cost_or_guess(t.method) for t in self._served)
        work += sum(self._cost_or_guess(w.method) for w in ahead)
        return work / self._limits.concurrency

    def drain_s(self) -> float:
        """How long the calls served and waiting take to drain, at least ``_MIN_RETRY_S``:
        the wait a refusal advises."""
        everyone = [*self._waiting["read"], *self._waiting["write"]]
        return max(self._start_in(everyone), _MIN_RETRY_S)

    def _refusal(self, why: str) -> errors.ReachstoreError:
        # The wait is all a caller needs. How many calls the process serves and queues is
        # every tenant's traffic, so it stays in the metrics and out of the refusal.
        drain_s = self.drain_s()
        return errors.ReachstoreError(
            errors.SERVICE_OVERLOADED,
            f"refused at once: {why}; retry in {drain_s:.3f} s",
            retry_after_ms=math.ceil(round(drain_s * 1000, 3)),
            structured_data={
                "limit": self._limits.concurrency,
                "drain_ms": round(drain_s * 1000, 1),
            },
        )
