"""The idempotency key a reach tool sends with its task, derived from the call itself.

An agent that calls a tool again — because its MCP connection broke before the answer
came, because the model repeated itself — must not send twice. So the key is never minted
per call: it is a hash of who calls (tenant and key id), which tool, the canonical JSON of
the arguments that say what to do (``entity_id``, ``action_type``, ``params``; not
``wait_ms``, which only says how long to wait for the answer) and the UTC day. The same
call the same day is the same task, which the reach service returns with
``deduplicated: true`` instead of reserving a new one.

Why a day: it is the reach channels' default window, so the key means what the channel's
own key means ("this, for this entity, once a day"), and it is far longer than any retry
after a transport error. A window boundary must not turn such a retry into a second send,
so for the first ``LOOKBACK`` of a day the previous day's key is looked up first
(``calls.py``): a retry within an hour of its first call finds the first call's task, even
across midnight. docs/MCP.md says how to send the same thing twice on purpose.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

WINDOW = dt.timedelta(days=1)
LOOKBACK = dt.timedelta(hours=1)
PREFIX = "mcp-"
# The arguments of a reach tool that make up its intent.
INTENT_ARGUMENTS = ("entity_id", "action_type", "params")


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def window_of(at: dt.datetime) -> str:
    """The UTC day ``at`` falls in."""
    return at.astimezone(dt.UTC).date().isoformat()


def derived_key(
    tenant: str, key_id: str, tool: str, arguments: Mapping[str, Any], window: str
) -> str:
    intent = {name: arguments.get(name) for name in INTENT_ARGUMENTS}
    text = canonical_json([tenant, key_id, tool, intent, window])
    return PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]


def keys_for(
    tenant: str, key_id: str, tool: str, arguments: Mapping[str, Any], now: dt.datetime
) -> tuple[str, str | None]:
    """This window's key, and the previous window's while ``now`` is within ``LOOKBACK``
    of the window's start (None after)."""
    current = derived_key(tenant, key_id, tool, arguments, window_of(now))
    start = dt.datetime.combine(now.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
    if now - start >= LOOKBACK:
        return current, None
    return current, derived_key(tenant, key_id, tool, arguments, window_of(now - WINDOW))
