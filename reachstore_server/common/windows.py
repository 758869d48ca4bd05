"""Idempotency windows: how often one intent may legitimately recur ("remind this customer
at most once a day" is window ``day``). The reach service puts the window an action falls
in into its idempotency key (reachstore_server/reach/idempotency.py); the MCP server's
derived keys use the channel's window too (reachstore_server/mcp/keying.py), so that both
keys mean the same "once per window"."""

from __future__ import annotations

import datetime

WINDOWS = ("none", "hour", "day", "week")

# How long each window lasts (``none`` never ends).
LENGTHS = {
    "hour": datetime.timedelta(hours=1),
    "day": datetime.timedelta(days=1),
    "week": datetime.timedelta(weeks=1),
}


def window_bucket(at: datetime.datetime, window: str) -> str:
    """The window ``at`` falls in, in UTC: ``-`` for "none" (the intent happens once, ever),
    ``2026-11-30T05`` for "hour", ``2026-11-30`` for "day", ``2026-W48`` for "week" (ISO
    weeks, whose year can differ from the calendar year around the new year). A naive
    datetime is refused: its moment is a guess, and a guess would split or merge windows."""
    if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
        raise ValueError(f"a timezone-aware datetime is required, got naive {at.isoformat()}")
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}; got {window!r}")
    if window == "none":
        return "-"
    utc = at.astimezone(datetime.UTC)
    day = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}"
    if window == "hour":
        return f"{day}T{utc.hour:02d}"
    if window == "day":
        return day
    year, week, _ = utc.isocalendar()
    return f"{year:04d}-W{week:02d}"


def window_start(at: datetime.datetime, window: str) -> datetime.datetime | None:
    """When the window ``at`` falls in began, in UTC (None for "none", which never begins
    anew)."""
    if window == "none":
        return None
    utc = at.astimezone(datetime.UTC)
    hour = utc.replace(minute=0, second=0, microsecond=0)
    if window == "hour":
        return hour
    day = hour.replace(hour=0)
    if window == "day":
        return day
    return day - datetime.timedelta(days=utc.weekday())
