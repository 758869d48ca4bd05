"""The Prometheus metrics port of a service, closed to DNS-rebinding pages.

The figures hold no tenant's data, but they tell what every tenant does (actions by
channel and state, queries and partial answers, the audit outbox), and a page the
developer visits could read them: its own name made to resolve to 127.0.0.1 makes the
browser treat the port as the page's origin. Such a request still names the page's host,
so only these are answered: loopback names, the listen address, the names in
``REACHSTORE_HTTP_ALLOWED_HOSTS``, and any IP address (rebinding needs a name; a
Prometheus server scrapes by address). A request without a Host (HTTP/1.0, not a browser)
is answered too. Anything else gets 403.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from reachstore_server.common.hosts import LOOPBACK_HOSTS, host_name, listen_host
from reachstore_server.common.tls import PLAIN, TlsFiles

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def host_guard(app: Callable[..., Any], hosts: Iterable[str], listen: str) -> Callable[..., Any]:
    """``app`` answering only requests whose Host is one of the above."""
    own = listen_host(listen)
    allowed = frozenset((*LOOPBACK_HOSTS, *hosts, *([own] if own else [])))

    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        authority = environ.get("HTTP_HOST")
        if authority is not None and "*" not in allowed:
            name = host_name(authority)
            if name is None or not (name in allowed or _is_address(name)):
                start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"this server does not answer for that host\n"]
        result: Iterable[bytes] = app(environ, start_response)
        return result

    return guarded


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # scrapes every few seconds would flood the JSON logs on stderr


def serve_metrics(
    address: str,
    registry: CollectorRegistry,
    allowed_hosts: Iterable[str] = (),
    tls: TlsFiles = PLAIN,
) -> None:
    """Serves ``registry`` in Prometheus text format at http://address/metrics (https://
    with the component's certificate when it serves TLS: the figures tell what every
    tenant does), on a daemon thread, behind ``host_guard``."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    server_class: type[WSGIServer] = _ThreadingServer6 if ":" in host else _ThreadingServer
    app = host_guard(make_wsgi_app(registry), allowed_hosts, address)
    server = make_server(
        host, int(port), app, server_class=server_class, handler_class=_QuietHandler
    )
    if tls.serving:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert_path, tls.key_path)
        # The handshake happens on the handler thread's first read, so a caller that never
        # finishes one does not hold up accepting the next.
        server.socket = context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
