"""Keeping slow and numerous HTTP clients from wearing the bridge down.

uvicorn reads a request head for as long as the client keeps sending bytes: a client that
trickles one header byte at a time (slow loris) holds its connection, its buffers and a
file descriptor forever, and enough of them exhaust the process. ``guarded_protocol``
builds uvicorn's httptools protocol with three limits added:

- a request head must be complete within ``head_timeout_s`` of the connection opening
  (or, on a kept-alive connection, of the first byte of the next request); otherwise the
  client gets 408 ``REQUEST_TOO_SLOW`` and the connection is closed;
- its body must be complete within ``body_timeout_s`` of the head; otherwise the
  connection is closed (with the same 408 when no response has started yet);
- a request head (request line and headers) may be at most ``MAX_HEAD_BYTES``: the
  parser keeps a head in memory until it ends, so a fast client could otherwise fill it
  within the deadline; a longer one gets 431 ``HEADERS_TOO_LARGE``;
- at most ``max_connections`` connections are served at once; a request arriving on a
  connection opened beyond that gets 503 ``TOO_MANY_CONNECTIONS`` and the connection closes;
- trailer fields after a chunked body are dropped, at most ``MAX_HEAD_BYTES`` of them:
  uvicorn adds each to the request's headers, and a caller that sent trailers without end
  grew a bridge by 15 times what it sent until the body deadline (2.4 GiB from 157 MiB in
  15 s, tests/e2e/test_attack18_bridge_trailers_pipelines.py); more closes the connection;
- at most ``MAX_PIPELINED`` requests may wait behind the one being answered on a
  connection: uvicorn parses and queues every request a caller sends ahead, and callers
  that sent 1 MiB of requests each and never read an answer held 60 MiB per connection,
  for good. A connection with more waiting is closed.

- a caller that takes none of its answer for ``write_timeout_s`` is cut off, and so are
  those that went longest without taking any when too many answers wait unread
  (``unsent_answers.py``).

Idle kept-alive connections are already closed by uvicorn after ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, cast

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reachstore_server.bridge import error_responses
from reachstore_server.bridge.unsent_answers import TlsWrites, UnsentAnswers, is_tls
from reachstore_server.common import errors

log = logging.getLogger(__name__)

_REASONS = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}
# Generous for any real client (browsers send a few KiB; a bearer key is 64 bytes).
MAX_HEAD_BYTES = 64 * 1024
# Requests a connection may send ahead of the answers (HTTP/1.1 pipelining): clients that
# pipeline at all send a few.
MAX_PIPELINED = 16


def too_slow(part: str, timeout_s: float) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.REQUEST_TOO_SLOW,
        f"the request {part} did not arrive within {timeout_s:g} s; the connection is closed",
        structured_data={"part": part, "timeout_s": timeout_s},
    )


def head_too_large(limit: int, actual: int) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.HEADERS_TOO_LARGE,
        f"the request line and headers exceed {limit} bytes; the connection is closed",
        structured_data={"limit_bytes": limit, "actual_bytes": actual},
    )


def too_many_connections(limit: int) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.TOO_MANY_CONNECTIONS,
        f"the bridge already serves {limit} connections; retry after the advised wait",
        structured_data={"limit": limit},
    )


def _raw_response(error: errors.ReachstoreError) -> bytes:
    """The whole HTTP/1.1 response for ``error``, written straight to the transport (no
    ASGI cycle is running, or the running one is abandoned)."""
    request_id = uuid.uuid4().hex
    response = error_responses.from_error(error, request_id)
    status = response.status_code
    lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Error"))]
    lines += [name + b": " + value for name, value in response.raw_headers]
    lines += [b"x-request-id: " + request_id.encode(), b"connection: close", b"", b""]
    return b"\r\n".join(lines) + response.body


class _Reject:
    """The ASGI app a request gets when its connection is beyond the cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = uuid.uuid4().hex
        response = error_responses.from_error(
            too_many_connections(self.limit), request_id, {"Connection": "close"}
        )
        response.headers["X-Request-Id"] = request_id
        await response(scope, receive, send)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with request deadlines and a connection cap."""

    head_timeout_s = 10.0
    body_timeout_s = 60.0
    max_connections = 2000
    # One per process: ``guarded_protocol`` gives each server class its own.
    unsent = UnsentAnswers(timeout_s=30.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._over_cap = False
        self._head_bytes = 0
        self._trailer_bytes = 0

    # --- connection -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Counted before this one joins: the cap is on connections already being served.
        self._over_cap = len(self.connections) >= self.max_connections
        if is_tls(transport):
            # It never pauses its writer on a large answer: its writes are looked at instead.
            watched = TlsWrites(transport, lambda: self.unsent.sweep(self.connections))
            transport = cast(asyncio.Transport, watched)  # it stands in for the transport
        super().connection_made(transport)
        self.unsent.follow(self.connections, self.loop)
        # A connection that never sends a byte is held to the head deadline too.
        self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.unsent.forget(self)
        super().connection_lost(exc)

    # --- answers not read (unsent_answers.py) --------------------------------------

    def pause_writing(self) -> None:
        """The transport holds more unsent bytes than its high-water mark: looked at now,
        not at the next sweep, so a flood of large answers meets the budget as it comes."""
        super().pause_writing()
        self.unsent.sweep(self.connections)

    def data_received(self, data: bytes) -> None:
        # The first byte of a request (also a pipelined or kept-alive one) starts its head
        # deadline; bytes of a body in progress run under the body deadline instead.
        if self._head_timer is None and self._body_timer is None:
            self._arm_head()
        in_head = self._head_timer is not None
        super().data_received(data)
        if len(self.pipeline) > MAX_PIPELINED and not self.transport.is_closing():
            log.info("over %d requests pipelined from %s: closing", MAX_PIPELINED, self.client)
            self._close_unanswered()
            return
        if in_head and self._head_timer is not None and not self.transport.is_closing():
            # Still inside the head after these bytes: count them against its cap.
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._cancel_timers()
                log.info("request head over %d bytes from %s: closing", MAX_HEAD_BYTES, self.client)
                self.transport.write(
                    _raw_response(head_too_large(MAX_HEAD_BYTES, self._head_bytes))
                )
                self.transport.close()

    def handle_websocket_upgrade(self) -> None:
        self._cancel_timers()
        super().handle_websocket_upgrade()

    # --- parser callbacks -------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._body_timer is None:
            super().on_header(name, value)
            return
        # A trailer field (after the last chunk of a body): not one of the request's
        # headers, which the app has read already; dropped, and bounded like a head.
        self._trailer_bytes += len(name) + len(value)
        if self._trailer_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            log.info("trailers over %d bytes from %s: closing", MAX_HEAD_BYTES, self.client)
            self._close_unanswered()

    def on_headers_complete(self) -> None:
        self._cancel(self._head_timer)
        self._head_timer = None
        self._head_bytes = 0
        self._trailer_bytes = 0
        self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_expired)
        if not self._over_cap:
            super().on_headers_complete()
            return
        # uvicorn picks the app for this request inside on_headers_complete.
        app, self.app = self.app, _Reject(self.max_connections)
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        self._cancel(self._body_timer)
        self._body_timer = None
        super().on_message_complete()

    # --- deadlines --------------------------------------------------------------------

    def _arm_head(self) -> None:
        self._cancel(self._head_timer)
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()

    def _cancel_timers(self) -> None:
        self._cancel(self._head_timer)
        self._cancel(self._body_timer)
        self._head_timer = self._body_timer = None

    def _close_unanswered(self) -> None:
        """Closes the connection; the request in progress, if its app is still waiting
        for the body, is told its client left."""
        self._cancel_timers()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.pipeline.clear()
        self.transport.close()

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        log.info(
            "request head not complete in %g s from %s: closing", self.head_timeout_s, self.client
        )
        if self.cycle is not None and not self.cycle.response_complete:
            # The late head is a pipelined request behind one still being answered: let
            # that answer finish, then close instead of waiting for the rest.
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        self.transport.write(_raw_response(too_slow("head", self.head_timeout_s)))
        self.transport.close()

    def _body_expired(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        log.info(
            "request body not complete in %g s from %s: closing", self.body_timeout_s, self.client
        )
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            # The app is still waiting for the body: it is told the client left, its own
            # answer is dropped, and the client gets the reason instead.
            cycle.disconnected = True
            cycle.message_event.set()
            self.transport.write(_raw_response(too_slow("body", self.body_timeout_s)))
        self.transport.close()


def guarded_protocol(
    head_timeout_s: float, body_timeout_s: float, write_timeout_s: float, max_connections: int
) -> type[GuardedHttpProtocol]:
    """The protocol class for uvicorn's ``http`` setting, with these limits."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "head_timeout_s": head_timeout_s,
            "body_timeout_s": body_timeout_s,
            "max_connections": max_connections,
            "unsent": UnsentAnswers(write_timeout_s),
        },
    )
