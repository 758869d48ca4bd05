"""How often each namespace was missing from this replica's answers, and why.

Status codes cannot show partial answers, so the replica counts them itself: per tenant and
namespace, per minute, the answers that included the namespace and those it was missing
from, by (category, error code). Only namespaces that exist are counted (a name that does
not exist is the caller's mistake, and counting every name asked for would let callers
grow this table without bound); minutes older than a day are dropped. The counters live in
memory: each replica reports the queries it answered since it started.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable

MINUTE_S = 60
KEEP_MINUTES = 24 * 60


@dataclasses.dataclass
class _Minute:
    minute: int
    queries: int = 0
    missing: Counter[tuple[int, str]] = dataclasses.field(default_factory=Counter)
    last_missing: float = 0.0


@dataclasses.dataclass(frozen=True)
class Coverage:
    """A namespace's counts over a window."""

    queries: int
    missing: int
    by_reason: list[tuple[int, str, int]]  # (category, error code, count), most first
    last_missing_at: float  # epoch seconds; 0 when never missing in the window

    @property
    def ratio(self) -> float:
        return (self.queries - self.missing) / self.queries if self.queries else 1.0


class CoverageLog:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._minutes: dict[tuple[str, str], deque[_Minute]] = {}
        self._time = clock

    def record(
        self, tenant: str, answered: Iterable[str], missing: Iterable[tuple[str, int, str]]
    ) -> None:
        """One answer: the namespaces that answered, and (name, category, code) of those
        that did not."""
        now = self._time()
        minute = int(now // MINUTE_S)
        with self._lock:
            for name in answered:
                self._minute(tenant, name, minute).queries += 1
            for name, category, code in missing:
                slot = self._minute(tenant, name, minute)
                slot.queries += 1
                slot.missing[(category, code)] += 1
                slot.last_missing = now

    def _minute(self, tenant: str, name: str, minute: int) -> _Minute:
        minutes = self._minutes.setdefault((tenant, name), deque())
        if not minutes or minutes[-1].minute != minute:
            minutes.append(_Minute(minute))
            while minutes and minutes[0].minute <= minute - KEEP_MINUTES:
                minutes.popleft()
        return minutes[-1]

    def coverage(self, tenant: str, name: str, window_s: int) -> Coverage:
        first = int((self._time() - window_s) // MINUTE_S)
        queries = missing = 0
        reasons: Counter[tuple[int, str]] = Counter()
        last = 0.0
        with self._lock:
            for slot in self._minutes.get((tenant, name), ()):
                if slot.minute < first:
                    continue
                queries += slot.queries
                missing += sum(slot.missing.values())
                reasons.update(slot.missing)
                last = max(last, slot.last_missing)
        by_reason = [(cat, code, n) for (cat, code), n in reasons.most_common()]
        return Coverage(queries, missing, by_reason, last)
