"""Who is calling, for the handler of the current call.

The gRPC layer authenticates each call before its handler runs and records the caller
here; handlers ask ``caller(context)`` or ``caller_tenant(context)``. Code that runs a
servicer in-process without the gRPC layer (some tests) acts as the local caller.
"""

from __future__ import annotations

import contextvars

import grpc

from reachstore_server.common.auth import LOCAL_CALLER, Caller

_current: contextvars.ContextVar[Caller] = contextvars.ContextVar("caller", default=LOCAL_CALLER)


def set_caller(value: Caller) -> contextvars.Token[Caller]:
    return _current.set(value)


def reset_caller(token: contextvars.Token[Caller]) -> None:
    _current.reset(token)


def caller(context: grpc.aio.ServicerContext | None) -> Caller:
    """The identity the current call acts for."""
    return _current.get()


def caller_tenant(context: grpc.aio.ServicerContext | None) -> str:
    """The tenant the current call acts for."""
    return _current.get().tenant
