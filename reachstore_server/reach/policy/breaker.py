"""A circuit breaker per channel: stop calling a receiver that is mostly failing.

While a provider is down, every send to it costs a timeout and a retry, and the retries add
load just when it tries to recover. The breaker watches the outcomes of the last
``window_s`` seconds; when more than ``failure_rate`` of them failed (and there were at
least ``min_samples``, so three unlucky calls at night do not trip it) it opens: calls are
held back for ``open_s``. Then it lets ``half_open_probes`` probe calls through; if every one
succeeds it closes, and if any fails it opens for another ``open_s``.

Nothing runs on a timer: the move from open to half-open happens at the first look
(``state`` or ``before_call``) after the open period. Not thread-safe, and need not be: the
executor drives every breaker from one asyncio loop.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal, Self

from reachstore_server.reach.policy.backoff import (
    FRACTION,
    POSITIVE_COUNT,
    SECONDS,
    check_fields,
    load_table,
)

State = Literal["closed", "open", "half_open"]
CLOSED: State = "closed"
OPEN: State = "open"
HALF_OPEN: State = "half_open"

# While every probe of a half-open breaker is still out, a caller is told to ask again after
# this long: the probes' answers, not the clock, decide what happens next.
PROBE_RETRY_S = 1.0

_RULES = {
    "window_s": SECONDS,
    "failure_rate": FRACTION,
    "min_samples": POSITIVE_COUNT,
    "open_s": SECONDS,
    "half_open_probes": POSITIVE_COUNT,
}


@dataclasses.dataclass(frozen=True)
class BreakerPolicy:
    """The breaker's numbers; it opens when the failure rate is strictly above
    ``failure_rate``, so exactly half failing (with the default) keeps it closed."""

    window_s: float = 10.0
    failure_rate: float = 0.5
    min_samples: int = 20
    open_s: float = 30.0
    half_open_probes: int = 5

    def __post_init__(self) -> None:
        check_fields(self, _RULES)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> Self:
        return load_table(cls, table, where, _RULES)


class CircuitBreaker:
    """One channel's breaker. Ask ``before_call()`` before each call; when it answers 0.0 make
    the call and report it with ``record(success)``; otherwise wait the seconds it answered.

    A probe permit whose call never reports back (its task was cancelled) would leave a
    half-open breaker waiting forever; so permits unanswered ``open_s`` after the last one
    was handed out are presumed lost and handed out again.

    ``on_change(old_state, new_state)`` is called after each transition (for metrics and the
    channel's history); an exception it raises reaches the caller, the transition stands.
    """

    def __init__(
        self,
        window_s: float = 10.0,
        failure_rate: float = 0.5,
        min_samples: int = 20,
        open_s: float = 30.0,
        half_open_probes: int = 5,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.policy = BreakerPolicy(window_s, failure_rate, min_samples, open_s, half_open_probes)
        self._clock, self._on_change = clock, on_change
        self._state: State = CLOSED
        # Closed: the outcomes of the window, oldest first, and how many of them failed.
        self._samples: deque[tuple[float, bool]] = deque()
        self._failures = 0
        # Open: when it may turn half-open.
        self._open_until = 0.0
        # Half-open: probe permits handed out, how many of those came back successful, and
        # when the permits still out are presumed lost.
        self._probes_out = 0
        self._probes_ok = 0
        self._probes_lost_at = 0.0

    @classmethod
    def from_policy(
        cls,
        policy: BreakerPolicy,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, str], None] | None = None,
    ) -> Self:
        return cls(
            policy.window_s,
            policy.failure_rate,
            policy.min_samples,
            policy.open_s,
            policy.half_open_probes,
            clock=clock,
            on_change=on_change,
        )

    @property
    def state(self) -> str:
        """The state as of now: "closed", "open" or "half_open"."""
        self._wake(self._clock())
        return self._state

    def before_call(self) -> float:
        """0.0 when a call may go now (in half-open this hands out one of the probe permits);
        otherwise the seconds until it is worth asking again."""
        now = self._clock()
        self._wake(now)
        if self._state == CLOSED:
            return 0.0
        if self._state == OPEN:
            return self._open_until - now
        if self._probes_out >= self.policy.half_open_probes and now >= self._probes_lost_at:
            self._probes_out = self._probes_ok  # hand the unanswered permits out again
        if self._probes_out < self.policy.half_open_probes:
            self._probes_out += 1
            self._probes_lost_at = now + self.policy.open_s
            return 0.0
        return min(PROBE_RETRY_S, self._probes_lost_at - now)

    def record(self, success: bool) -> None:
        """The outcome of a call ``before_call`` let through.

        An outcome arriving while the breaker is open, or in half-open with no probe out,
        belongs to a call let through before the breaker opened; it says nothing about the
        receiver now and is ignored.
        """
        now = self._clock()
        self._wake(now)
        if self._state == CLOSED:
            self._record_closed(now, success)
        elif self._state == HALF_OPEN and self._probes_ok < self._probes_out:
            if not success:
                self._open(now)
                return
            self._probes_ok += 1
            if self._probes_ok >= self.policy.half_open_probes:
                self._move(CLOSED)

    def _record_closed(self, now: float, success: bool) -> None:
        self._samples.append((now, success))
        self._failures += not success
        horizon = now - self.policy.window_s
        while self._samples[0][0] < horizon:  # the newest sample is never older than now
            _, ok = self._samples.popleft()
            self._failures -= not ok
        samples = len(self._samples)
        if samples >= self.policy.min_samples and (
            self._failures > self.policy.failure_rate * samples
        ):
            self._open(now)

    def _wake(self, now: float) -> None:
        if self._state == OPEN and now >= self._open_until:
            self._move(HALF_OPEN)

    def _open(self, now: float) -> None:
        self._open_until = now + self.policy.open_s
        self._move(OPEN)

    def _move(self, new: State) -> None:
        """Every transition starts its state afresh: no sample or probe count carries over."""
        old, self._state = self._state, new
        self._samples.clear()
        self._failures = self._probes_out = self._probes_ok = 0
        if self._on_change is not None:
            self._on_change(old, new)
