"""What the bridge accepts from web browsers: the Host a request names, and the Origin of
the page that sent it. Runs before anything else, console included.

A web page can make the browser call the bridge in two ways that matter:

- DNS rebinding: the page's own name (``rebind.example``) is made to resolve to
  127.0.0.1, so the browser treats the bridge as the page's own origin and reads every
  answer. The request still names the page's host: ``Host: rebind.example:8420``. Only
  loopback names, the bridge's own listen address and ``REACHSTORE_HTTP_ALLOWED_HOSTS``
  are answered; anything else is 403 HOST_NOT_ALLOWED.
- A page of another origin sending requests it cannot read the answers to. The browser
  names that origin (``Origin: https://other.example``): only the bridge's own origin
  (the Origin's host and port are the request's Host) and
  ``REACHSTORE_HTTP_ALLOWED_ORIGINS`` are answered; anything else, ``null`` included, is
  403 ORIGIN_NOT_ALLOWED. Requests without an Origin (curl, the SDKs) pass.

Requests a page can send without the browser asking first (a CORS "simple" request) are
also closed by the body rule in ``http_body.py``: a POST must be ``application/json``.

``/healthz`` and ``/readyz`` are answered whatever the Host (probes use addresses); they
hold no data and change nothing.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
import uuid
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from reachstore_server.bridge import error_responses
from reachstore_server.common import errors
from reachstore_server.common.hosts import LOOPBACK_HOSTS, host_name, listen_host

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


@dataclasses.dataclass(frozen=True)
class WebGuard:
    """The hosts and origins the bridge answers (lowercased)."""

    hosts: frozenset[str]
    origins: frozenset[str]

    @classmethod
    def of(cls, hosts: Iterable[str], origins: Iterable[str], listen: str = "") -> WebGuard:
        own = listen_host(listen) if listen else None
        return cls(
            frozenset((*LOOPBACK_HOSTS, *hosts, *([own] if own else []))), frozenset(origins)
        )

    def refusal(self, path: str, headers: Headers) -> errors.ReachstoreError | None:
        """Why the request must not be answered, or None."""
        if path in OPEN_PATHS:
            return None
        authority = headers.get("host", "")
        name = host_name(authority)
        if "*" not in self.hosts and (name is None or name not in self.hosts):
            return errors.ReachstoreError(
                errors.HOST_NOT_ALLOWED,
                f"this server does not answer for the host {authority[:100]!r}",
                structured_data={"host": authority[:100]},
            )
        origin = headers.get("origin")
        if origin is None or _same_origin(origin, authority) or origin.lower() in self.origins:
            return None
        return errors.ReachstoreError(
            errors.ORIGIN_NOT_ALLOWED,
            f"pages of {origin[:100]!r} may not call this server",
            structured_data={"origin": origin[:100]},
        )


def _same_origin(origin: str, authority: str) -> bool:
    parts = urllib.parse.urlsplit(origin.strip().lower())
    return parts.scheme in ("http", "https") and parts.netloc == authority.strip().lower()


class WebGuardMiddleware:
    """ASGI middleware: refuses, in the error shape, what ``WebGuard`` refuses."""

    def __init__(self, app: ASGIApp, guard: WebGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.guard.refusal(scope["path"], Headers(scope=scope))
            if refusal is not None:
                request_id = uuid.uuid4().hex
                response = error_responses.from_error(refusal, request_id)
                response.headers["X-Request-Id"] = request_id
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
