"""Cooperative cancellation for searches.

A search runs inside a worker thread under a time budget. Python cannot kill a thread,
so the search polls a :class:`CancelToken` between stages and inside its loops and
stops by raising :class:`SearchCancelled`. What runs between two checks is one faiss
call or one numpy step: an unfiltered dense search (<= 0.5 ms at the chosen size
threshold, see ``dense.py``), one BM25 block of 8,192 postings (tens of microseconds),
or, the longest, an exact filtered scan of a large HNSW namespace (~3.7 ms at 50,000).
"""

from __future__ import annotations

import time

__all__ = ["CancelToken", "SearchCancelled"]


class SearchCancelled(Exception):
    """The search was cancelled or ran past its deadline.

    ``reason`` is ``"cancelled"`` (someone called :meth:`CancelToken.cancel`) or
    ``"deadline"`` (the token's deadline passed).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"search stopped: {reason}")
        self.reason = reason


class CancelToken:
    """A cancellation flag (safe to set from any thread) with an optional deadline.

    ``deadline`` is a ``time.monotonic()`` value. ``parent`` links a per-namespace token
    to the token of the whole query: cancelling the parent cancels the child (the child
    can still have its own, shorter deadline).
    """

    __slots__ = ("_cancelled", "deadline", "parent")

    def __init__(self, deadline: float | None = None, *, parent: CancelToken | None = None) -> None:
        # A plain flag, not a threading.Event: nobody waits on a token, and writing or
        # reading one attribute is atomic under the interpreter lock. Five tokens are made
        # per query, and an Event (a Condition and a lock) showed in the query process's
        # profile at 2.4 % of its interpreter-lock time.
        self._cancelled = False
        self.deadline = deadline
        self.parent = parent

    def cancel(self) -> None:
        self._cancelled = True

    def _reason(self) -> str | None:
        token: CancelToken | None = self
        now: float | None = None
        while token is not None:
            if token._cancelled:
                return "cancelled"
            if token.deadline is not None:
                if now is None:
                    now = time.monotonic()
                if now >= token.deadline:
                    return "deadline"
            token = token.parent
        return None

    @property
    def cancelled(self) -> bool:
        """True once cancelled or past the deadline (of this token or a parent)."""
        return self._reason() is not None

    def check(self) -> None:
        """Raise :class:`SearchCancelled` if the work should stop."""
        reason = self._reason()
        if reason is not None:
            raise SearchCancelled(reason)

    def remaining(self) -> float | None:
        """Seconds until the nearest deadline (may be negative), or None without one."""
        best: float | None = None
        token: CancelToken | None = self
        while token is not None:
            if token.deadline is not None and (best is None or token.deadline < best):
                best = token.deadline
            token = token.parent
        return None if best is None else best - time.monotonic()

    def __repr__(self) -> str:
        return f"CancelToken(deadline={self.deadline!r}, cancelled={self.cancelled})"
