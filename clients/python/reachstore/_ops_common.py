"""What every operation shares: the client's default deadline and retry policy, and the
one way an operation sends an RPC (``_call``).

The operations themselves live in ``_ops_storage``, ``_ops_reach`` and ``_ops_audit``;
each returns a flow (see ``_flow``) that either client runs.
"""

from __future__ import annotations

from typing import TypeVar, cast

from google.protobuf.message import Message

from reachstore import _flow
from reachstore._config import check_timeout
from reachstore._flow import Flow
from reachstore._retry import RetryPolicy
from reachstore._rpc import RPCS

_M = TypeVar("_M", bound=Message)


class OperationsBase:
    def __init__(self, timeout: float, retries: RetryPolicy | None) -> None:
        self.timeout = check_timeout(timeout)
        self.retries = retries

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else check_timeout(timeout)

    def _call(
        self, name: str, request: Message, response: type[_M], timeout: float | None
    ) -> Flow[_M]:
        """Sends ``request`` to the RPC ``name`` ("Service.Method") under the call's
        deadline and the client's retry policy; returns its ``response`` message."""
        rpc = RPCS[name]
        if rpc.response_class is not response:
            raise TypeError(f"{name} answers {rpc.response_class.__name__}")
        reply = yield from _flow.call(rpc, request, self._deadline(timeout), self.retries)
        return cast(_M, reply)
