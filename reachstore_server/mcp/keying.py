"""The idempotency key a reach tool sends with its task, derived from the call itself.

An agent that calls a tool again — because its MCP connection broke before the answer
came, because the model repeated itself — must not send twice. So the key is never minted
per call: it is an HMAC-SHA256 of who calls (tenant and key id), which tool, the canonical
JSON of the arguments that say what to do (``entity_id``, ``action_type``, ``params``; not
``wait_ms``, which only says how long to wait for the answer) and the channel's window
(reachstore_server/common/windows.py). The same call in the same window is the same task,
which the reach service returns with ``deduplicated: true`` instead of reserving a new one.

Why keyed, and with the caller's own API key as the HMAC key: everything else that goes in
is visible to other keys of the tenant (a reach task shows its ``submitted_by``), so a
plain hash could be computed in advance by another key, which would then reserve a decoy
task under it and block the agent's send for the window (IDEMPOTENCY_KEY_REUSED). The
caller's key is known to the caller alone, and is the same after a restart of this server
or on another replica, so retries still meet their first call. The keyless local caller
of a development system (no keys at all, so no other key to forge with) uses the empty
secret. docs/MCP.md says the same.

Why the channel's window: the channel's own key says "this, for this entity, once per
window" (an hour, a day, a week, or once ever), and the tool's key must mean the same. A
key of a longer window would answer the next hour's page on an hourly channel with the
last hour's task, and never send it; a shorter one would only leave the channel's own key
to find the earlier action. A window boundary must not turn a retry after a transport
error into a second send, so for the first ``lookback(window)`` of a window the previous
window's key is looked up first (``calls.py``): a retry that soon after its first call
finds the first call's task across the boundary. The look-back is an hour, or a quarter of
the window where that is shorter (15 minutes on an hourly channel), so that it stays a
retry's allowance and does not swallow the next window's own call. docs/MCP.md says how
to send the same thing twice on purpose.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from reachstore_server.common import windows

MAX_LOOKBACK = dt.timedelta(hours=1)
# A channel that does not say (a server older than ListChannels' window field) is taken
# as the reach channels' default window.
DEFAULT_WINDOW = "day"
PREFIX = "mcp-"
# The arguments of a reach tool that make up its intent.
INTENT_ARGUMENTS = ("entity_id", "action_type", "params")


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def lookback(window: str) -> dt.timedelta | None:
    """How long after a window starts a call is still looked up as a retry of the
    previous window's (None for a window that never starts anew)."""
    length = windows.LENGTHS.get(window)
    return None if length is None else min(MAX_LOOKBACK, length / 4)


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
    window: str = DEFAULT_WINDOW,
) -> tuple[str, str | None]:
    """This window's key, and the previous window's while ``now`` is within
    ``lookback(window)`` of the window's start (None after)."""
    window = window or DEFAULT_WINDOW
    current = derived_key(
        secret, tenant, key_id, tool, arguments, windows.window_bucket(now, window)
    )
    start, allowance = windows.window_start(now, window), lookback(window)
    if start is None or allowance is None or now - start >= allowance:
        return current, None
    previous = windows.window_bucket(start - dt.timedelta(microseconds=1), window)
    return current, derived_key(secret, tenant, key_id, tool, arguments, previous)
