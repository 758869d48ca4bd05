"""The idempotency key a reach tool sends with its task, derived from the call itself.

An agent that calls a tool again — because its MCP connection broke before the answer
came, because the model repeated itself — must not send twice. So the key is never minted
per call: it is an HMAC-SHA256 of who calls (tenant and key id), which tool, the canonical
JSON of the arguments that say what to do (``entity_id``, ``action_type``, ``params``; not
``wait_ms``, which only says how long to wait for the answer) and the UTC day. The same
call the same day is the same task, which the reach service returns with
``deduplicated: true`` instead of reserving a new one.

Why keyed, and with the caller's own API key as the HMAC key: everything else that goes in
is visible to other keys of the tenant (a reach task shows its ``submitted_by``), so a
plain hash could be computed in advance by another key, which would then reserve a decoy
task under it and block the agent's send for the day (IDEMPOTENCY_KEY_REUSED). The
caller's key is known to the caller alone, and is the same after a restart of this server
or on another replica, so retries still meet their first call. The keyless local caller
of a development system (no keys at all, so no other key to forge with) uses the empty
secret. docs/MCP.md says the same.

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
import hmac
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
    secret: str, tenant: str, key_id: str, tool: str, arguments: Mapping[str, Any], window: str
) -> str:
    """``secret`` is the caller's API key as it sent it ("" for the keyless caller)."""
    intent = {name: arguments.get(name) for name in INTENT_ARGUMENTS}
    text = canonical_json([tenant, key_id, tool, intent, window])
    digest = hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:40]


def keys_for(
    secret: str,
    tenant: str,
    key_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    now: dt.datetime,
) -> tuple[str, str | None]:
    """This window's key, and the previous window's while ``now`` is within ``LOOKBACK``
    of the window's start (None after)."""
    current = derived_key(secret, tenant, key_id, tool, arguments, window_of(now))
    start = dt.datetime.combine(now.astimezone(dt.UTC).date(), dt.time(), dt.UTC)
    if now - start >= LOOKBACK:
        return current, None
    previous = window_of(now - WINDOW)
    return current, derived_key(secret, tenant, key_id, tool, arguments, previous)
