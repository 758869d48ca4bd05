"""RFC 3339 timestamps for API responses."""

from __future__ import annotations

import datetime as dt


def rfc3339(value: dt.datetime) -> str:
    # SQLite hands back naive datetimes; everything we store is UTC.
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
