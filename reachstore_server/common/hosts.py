"""The host a request names (its ``Host`` header), and the names a local server answers
for: what keeps a DNS-rebinding page out of the bridge (``reachstore_server/bridge/web_guard.py``)
and the metrics ports (``reachstore_server/common/metrics_http.py``)."""

from __future__ import annotations

import ipaddress

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def host_name(authority: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercased;
    None when it is not of that form."""
    text = authority.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, port = text[: end + 1], text[end + 1 :]
    else:
        name, colon, rest = text.partition(":")
        port = colon + rest
    if port and not (port.startswith(":") and port[1:].isascii() and port[1:].isdigit()):
        return None
    return name or None


def listen_host(listen: str) -> str | None:
    """The host of a listen address, when it is one machine address (not a wildcard such
    as 0.0.0.0): requests naming it are the server's own."""
    host = listen.rpartition(":")[0].strip("[]").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host or None
    if address.is_unspecified:
        return None
    return f"[{address}]" if address.version == 6 else str(address)


def is_loopback(host: str) -> bool:
    """Whether a listen host (``127.0.0.1``, ``::1``, ``[::1]``, ``localhost``) reaches only
    this machine."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
