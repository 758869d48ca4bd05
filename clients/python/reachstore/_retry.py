"""When to send a failed call again, and after how long.

A call is repeated only when all of these hold:

- the error says so (``retryable``: categories transient and timeout, and quota errors
  that pass with time, such as RATE_LIMITED);
- repeating cannot do anything twice: the proto marks the method NO_SIDE_EFFECTS or
  IDEMPOTENT, or the request carries the idempotency key that makes the server answer a
  repeat with the first result (SubmitTask and Reach with ``idempotency_key``);
- attempts are left (``max_attempts`` counts the first one);
- the wait and another attempt fit in what is left of the call's deadline.

The wait is the server's ``retry_after_ms`` when it gives one (never shorter, plus a
little jitter so that many clients told the same wait do not return at the same
instant); otherwise exponential backoff with jitter.
"""

from __future__ import annotations

import dataclasses
import random

from google.protobuf.message import Message

from reachstore._errors import ReachstoreError
from reachstore._rpc import Rpc

_random = random.Random()
# An attempt given less time than this would only time out: not worth waiting for.
MIN_ATTEMPT_S = 0.05


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a client repeats calls that failed for a passing reason (see the module rules).

    ``max_attempts`` counts the first attempt (1 turns retries off, as does passing
    ``retries=None`` to a client). ``deadline``, in seconds, bounds one call with all its
    attempts and waits; None means the call's own ``timeout`` does, so by default a call
    never takes longer than its timeout, retries included. Each attempt gets what is left.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    multiplier: float = 2.0
    # Each wait is scaled by a random factor in [1 - jitter, 1 + jitter] (backoff) or
    # [1, 1 + jitter] (an advised wait, which is a minimum).
    jitter: float = 0.2
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (the first attempt)")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("backoff must satisfy 0 <= initial_backoff <= max_backoff")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.deadline is not None and not self.deadline > 0:
            raise ValueError("deadline must be positive seconds (or None)")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based) when the server
        advised none."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * _random.uniform(1 - self.jitter, 1 + self.jitter)

    def advised(self, retry_after_ms: int) -> float:
        return retry_after_ms / 1000 * _random.uniform(1, 1 + self.jitter)


def retry_delay(
    policy: RetryPolicy | None,
    rpc: Rpc,
    request: Message,
    error: ReachstoreError,
    attempt: int,
    remaining: float,
) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``, or None to give up and raise.

    ``remaining`` is what is left of the call's deadline, in seconds.
    """
    if policy is None or attempt >= policy.max_attempts:
        return None
    if not error.retryable or not rpc.repeatable(request):
        return None
    if error.retry_after_ms is not None:
        wait = policy.advised(error.retry_after_ms)
    else:
        wait = policy.backoff(attempt)
    # Waiting only to run out of time on the next attempt helps nobody: give the caller
    # the error (with its retry_after_ms) now.
    if remaining - wait < MIN_ATTEMPT_S:
        return None
    return wait
