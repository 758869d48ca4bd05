"""Who is calling. Until API keys exist every caller acts for the one local tenant; this
function is the single place that will read the caller's credentials instead."""

from __future__ import annotations

import grpc

LOCAL_TENANT = "default"


def caller_tenant(context: grpc.aio.ServicerContext) -> str:
    """The tenant a call acts for."""
    return LOCAL_TENANT
