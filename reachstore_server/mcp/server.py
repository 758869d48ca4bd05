"""The MCP server: the tools of ``catalogue.py`` answered by ``calls.py``, over stdio or
streamable HTTP.

Whom a request speaks for decides everything it sees. Over stdio that is the one key of
the process (``REACHSTORE_API_KEY``, never a command-line argument: argv shows in ``ps``);
over HTTP it is the request's own ``Authorization: Bearer <key>`` (or ``X-API-Key``) —
the services authenticate it on every call, exactly as for the REST bridge, and a request
without one is the keyless local caller, which only a development system accepts. For each
request the server reads the key (``GetCurrentKey``) and its channels (``ListChannels``),
so a revoked or expired key stops working at once and a changed allow-list shows at the
next ``tools/list``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)
from starlette.applications import Starlette

from reachstore import ApiKey, AsyncClient, ReachstoreError, Tls
from reachstore_server.mcp import calls, catalogue, shapes
from reachstore_server.mcp.catalogue import Profiles, ToolSpec

log = logging.getLogger("reachstore_server.mcp")

NAME = "reachstore"
INSTRUCTIONS = (
    "reachstore: semantic storage that answers partially and honestly, and reach, which "
    "carries actions to the outside world at most once. Every result says what is missing "
    "in structuredContent (coverage_ratio, failures with category, retryable, "
    "retry_after_ms) and in its first line of text. Retry only what is retryable, after "
    "the advised wait. A send_* tool has an external side effect; calling it again with the "
    "same arguments the same day returns the same action instead of sending again."
)
# Clients kept for the keys of recent HTTP requests (each holds its gRPC channels).
MAX_CLIENTS = 64
# An API key travels in either header, as at the REST bridge.
BEARER = "bearer "
# The variable the SDK reads its key from, as cli_mcp.py documents.
KEY_VARIABLE = "REACHSTORE_API_KEY"


class _Entry:
    """A cached client, the key it speaks with ("" for the keyless local caller: see
    keying.py) and how many calls are using it right now."""

    def __init__(self, client: AsyncClient, secret: str) -> None:
        self.client = client
        self.secret = secret
        self.in_flight = 0
        self.evicted = False


class Connections:
    """The SDK client each caller is served with: one for the process's own key (stdio),
    or one per API key seen over HTTP, the least recently used dropped past
    ``MAX_CLIENTS``.

    A key is cached before the services have checked it (checking it takes a client), so
    anyone can push others out of the cache with made-up keys. Eviction therefore only
    drops the entry: the client is closed once its last call in flight ends, never under
    one. Reference counting is the smallest change that makes that hold for every caller,
    authenticated or not, while keeping one channel set per key."""

    def __init__(
        self, targets: Mapping[str, str], tls: Tls | None, timeout: float, per_request: bool
    ) -> None:
        self._targets = dict(targets)
        self._tls = tls
        self._timeout = timeout
        self._per_request = per_request
        self._clients: collections.OrderedDict[str | None, _Entry] = collections.OrderedDict()
        # Over stdio the SDK speaks with the key in the environment (reachstore/_config.py);
        # the same key is the secret of the idempotency keys (keying.py).
        self._own_key = "" if per_request else os.environ.get(KEY_VARIABLE, "")
        self._closing: set[asyncio.Task[None]] = set()

    def _new(self, api_key: str | None) -> AsyncClient:
        return AsyncClient(
            self._targets["query"],
            self._targets["ingest"],
            reach_target=self._targets["reach"],
            audit_target=self._targets["audit"],
            timeout=self._timeout,
            # Over HTTP only the request's own key counts: "" is the keyless caller, never
            # a key this process happens to hold in its environment.
            api_key=api_key if self._per_request else None,
            tls=self._tls if self._tls is not None else False,
        )

    def _close_later(self, entry: _Entry) -> None:
        closing = asyncio.get_running_loop().create_task(entry.client.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    @contextlib.asynccontextmanager
    async def client(self, headers: Mapping[str, str] | None) -> AsyncIterator[_Entry]:
        """The client for the request's key (with the key), kept open until the caller is
        done with it.

        Raises ``AuthError`` (AUTH_MALFORMED) for a key that is not printable ASCII."""
        api_key = _api_key(headers) if self._per_request else None
        entry = self._clients.get(api_key)
        if entry is None:
            entry = self._clients[api_key] = _Entry(
                self._new(api_key if api_key is not None else ""),
                (api_key or "") if self._per_request else self._own_key,
            )
            while len(self._clients) > MAX_CLIENTS:
                _, old = self._clients.popitem(last=False)
                old.evicted = True
                if old.in_flight == 0:
                    self._close_later(old)
        else:
            self._clients.move_to_end(api_key)
        entry.in_flight += 1
        try:
            yield entry
        finally:
            entry.in_flight -= 1
            if entry.evicted and entry.in_flight == 0:
                self._close_later(entry)

    async def close(self) -> None:
        entries, self._clients = list(self._clients.values()), collections.OrderedDict()
        for entry in entries:
            await entry.client.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _api_key(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    authorization = headers.get("authorization", "")
    if authorization[: len(BEARER)].lower() == BEARER:
        key = authorization[len(BEARER) :].strip() or None
    else:
        key = headers.get("x-api-key") or None
    # gRPC metadata carries only printable ASCII, and every key is (rsk_<id>_<secret>):
    # anything else is refused here as the services refuse a malformed key, as the REST
    # bridge does (bridge/app.py), and never reaches the gRPC library or the cache.
    if key is not None and not (key.isascii() and key.isprintable()):
        raise calls.auth_malformed()
    return key


def _headers(ctx: Any) -> Mapping[str, str] | None:
    """The HTTP request's headers (None over stdio)."""
    return getattr(getattr(ctx, "request", None), "headers", None)


def _refusal(error: ReachstoreError) -> MCPError:
    """A refused ``tools/list``: a JSON-RPC error carrying the API's error body."""
    content = shapes.error_content(error)
    return MCPError(INVALID_PARAMS, shapes.error_text(content), content["error"])


def _internal(exc: Exception) -> ReachstoreError:
    """An unexpected failure, logged here and answered as INTERNAL: its text (the gRPC
    library's, say, with memory addresses) is for the log, never for the caller."""
    log.exception("MCP request failed unexpectedly", exc_info=exc)
    return calls.internal()


class ReachstoreMcp:
    """The server's handlers over ``connections``, with the tool ``profiles``."""

    def __init__(self, connections: Connections, profiles: Profiles) -> None:
        self.connections = connections
        self.profiles = profiles

    async def _tools(self, client: AsyncClient) -> tuple[ApiKey, list[ToolSpec]]:
        key = await client.current_key()
        # ListChannels needs `read`; without it the key is shown no reach tool anyway.
        channels = await client.list_channels() if "read" in key.scopes else []
        return key, catalogue.tools_for(key, channels, self.profiles.of(key.key_id))

    async def list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        try:
            async with self.connections.client(_headers(ctx)) as caller:
                _, tools = await self._tools(caller.client)
        except ReachstoreError as exc:
            raise _refusal(exc) from exc
        except Exception as exc:
            raise _refusal(_internal(exc)) from exc
        return ListToolsResult(tools=[t.tool for t in tools])

    async def call_tool(self, ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        try:
            async with self.connections.client(_headers(ctx)) as caller:
                key, tools = await self._tools(caller.client)
                spec = next((t for t in tools if t.name == params.name), None)
                if spec is None:
                    # As for any name a server does not offer: this key is not shown it.
                    raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name[:128]}")
                return await calls.call(
                    caller.client, key, caller.secret, spec, params.arguments or {}
                )
        except MCPError:
            raise
        except ReachstoreError as exc:
            return calls.refused(exc)
        except Exception as exc:
            return calls.refused(_internal(exc))

    def server(self) -> Server[Any]:
        return Server(
            NAME,
            version="0.1.0",
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )


def http_app(
    mcp: ReachstoreMcp,
    allowed_hosts: tuple[str, ...],
    allowed_origins: tuple[str, ...],
    scheme: str,
) -> Starlette:
    """Streamable HTTP at ``/mcp``, answering only requests that name a loopback host or
    one of ``allowed_hosts`` and come from no web page or an allowed origin: a page in the
    developer's browser must not reach the keyless local caller (as at the bridge)."""
    loopback = ["127.0.0.1", "localhost", "[::1]"]
    hosts = [*loopback, *allowed_hosts]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{host}:*" for host in hosts)],
        allowed_origins=[
            *(f"{scheme}://{host}:*" for host in hosts),
            *(f"{scheme}://{host}" for host in hosts),
            *allowed_origins,
        ],
    )
    # Stateless: each request carries its key and stands alone, so any replica answers it
    # and a key's tools are read afresh every time.
    return mcp.server().streamable_http_app(
        stateless_http=True, json_response=True, transport_security=security
    )
