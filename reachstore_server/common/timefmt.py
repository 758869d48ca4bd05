"""RFC 3339 timestamps: formatting them for API responses, and reading them from requests."""

from __future__ import annotations

import datetime as dt

from reachstore_server.common import errors

EXAMPLE = "2026-11-30T09:00:00Z"


def rfc3339(value: dt.datetime) -> str:
    # SQLite hands back naive datetimes; everything we store is UTC.
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_rfc3339(text: str, field: str) -> dt.datetime:
    """``text`` as an aware datetime in UTC, or INVALID_ARGUMENT naming ``field``.

    A time with an offset can be inside the calendar as written and outside it in UTC
    (``0001-01-01T00:00:00+05:00``, ``9999-12-31T23:59:59-14:00``): moving it raises
    OverflowError, which is the caller's mistake like any other, not a server error.
    """
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise errors.invalid(field, f"an RFC 3339 time with an offset, e.g. {EXAMPLE}") from None
    if value.tzinfo is None:
        raise errors.invalid(field, "needs an offset (Z or ±hh:mm)")
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise errors.invalid(
            field, "lies outside 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once moved to UTC"
        ) from None
