"""Reading ``Retry-After`` (RFC 9110 §10.2.3): either a number of seconds or an HTTP-date."""

from __future__ import annotations

import datetime
import email.utils
import math
import time


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait, never negative; None when the header is absent or unreadable.

    ``now`` (a Unix time) is only for tests; a date in the past means "retry now" (0.0).
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" parses as naive, but an HTTP-date is always GMT
        when = when.replace(tzinfo=datetime.UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
