"""The ways out of reachstore: one channel per configured receiver.

``build_channel`` turns one settings table into a ready channel; each kind parses its own
options (``WebhookOptions``, ``EmailOptions``, ``GrpcOptions``) and refuses unknown keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.channels.base import Channel
from reachstore_server.reach.channels.email import EmailChannel, EmailOptions
from reachstore_server.reach.channels.grpc_call import GrpcCallChannel, GrpcOptions
from reachstore_server.reach.channels.webhook import WebhookChannel, WebhookOptions

KINDS = ("webhook", "email", "grpc")

__all__ = [
    "KINDS",
    "EmailChannel",
    "EmailOptions",
    "GrpcCallChannel",
    "GrpcOptions",
    "WebhookChannel",
    "WebhookOptions",
    "build_channel",
]


def build_channel(
    kind: str, table: Mapping[str, Any], where: str, env: Mapping[str, str]
) -> Channel:
    """A channel of ``kind`` set up from ``table`` (the settings at ``where``, e.g.
    ``channels.tickets``); secrets are read from ``env``. Raises ConfigError naming the
    offending key."""
    if kind == "webhook":
        return WebhookChannel(WebhookOptions.from_table(table, where, env))
    if kind == "email":
        return EmailChannel(EmailOptions.from_table(table, where, env))
    if kind == "grpc":
        return GrpcCallChannel(GrpcOptions.from_table(table, where, env))
    raise ConfigError(f"{where}: unknown channel kind {kind!r} (known: {', '.join(KINDS)})")
