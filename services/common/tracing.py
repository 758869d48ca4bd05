"""Trace ids: taken from the caller (W3C ``traceparent`` or ``x-trace-id``), carried into
audit events and on to the receivers of reach actions."""

from __future__ import annotations

import re
from collections.abc import Sequence

TRACE_RE = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT_RE = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_from_metadata(metadata: Sequence[tuple[str, str | bytes]]) -> str:
    """The caller's trace id: W3C ``traceparent``, else ``x-trace-id``, else empty."""
    values = {k: v if isinstance(v, str) else v.decode("latin-1") for k, v in metadata}
    match = _TRACEPARENT_RE.fullmatch(values.get("traceparent", "").strip())
    if match:
        return match.group(1)
    candidate = values.get("x-trace-id", "").strip().lower()
    return candidate if TRACE_RE.fullmatch(candidate) else ""
