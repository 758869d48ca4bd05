"""What the audit shipper takes as the audit service refusing its events for good
(``refusal_of``, reachstore_server/audit_client/shipper.py): such events are split off and
quarantined, so a refusal that passes must never read as one.

gRPC answers RESOURCE_EXHAUSTED, without reachstore's details, both for a message over the
size limit (refused for good) and for a flooded server with too many calls pending (which
passes). The texts are gRPC's own."""

from __future__ import annotations

import grpc
from grpc.aio import AioRpcError, Metadata

from reachstore_server.audit_client.shipper import refusal_of


def _bare(code: grpc.StatusCode, details: str) -> AioRpcError:
    return AioRpcError(code, Metadata(), Metadata(), details)


def test_a_message_over_the_size_limit_is_refused_for_good() -> None:
    for details in (
        "Received message larger than max (40000000 vs. 33554432)",
        "Sent message larger than max (40000000 vs. 33554432)",
    ):
        refusal = refusal_of(_bare(grpc.StatusCode.RESOURCE_EXHAUSTED, details))
        assert refusal is not None and "larger than max" in refusal


def test_a_server_with_too_many_calls_pending_is_waited_out() -> None:
    exc = _bare(grpc.StatusCode.RESOURCE_EXHAUSTED, "Too many pending requests for this server")
    assert refusal_of(exc) is None


def test_a_call_the_server_did_not_take_in_time_is_waited_out() -> None:
    assert refusal_of(_bare(grpc.StatusCode.CANCELLED, "CANCELLED")) is None
