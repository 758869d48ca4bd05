"""With tracing on, the gRPC channel's outgoing ``traceparent`` names a span this process
exported, in the action's trace: a receiver can find its caller in the trace store."""

from __future__ import annotations

import asyncio
import re

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reachstore_server.common import otel
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import Answer, Status
from reachstore_server.reach.channels.grpc_call import GrpcCallChannel

from .conftest import make_action
from .peers import ASSIGN_METHOD, GrpcReceiver


def test_the_receiver_s_traceparent_names_an_exported_span_of_the_action_s_trace(
    grpc_receiver: GrpcReceiver,
) -> None:
    spans = InMemorySpanExporter()
    provider = otel.new_provider("test", {})
    provider.add_span_processor(SimpleSpanProcessor(spans))
    action = make_action({"ticket": "T-7", "group": "network", "count": 1})

    async def send() -> Answer:
        # Built inside ``using``, as reach builds its channels after turning tracing on.
        table = {"target": grpc_receiver.target, "method": ASSIGN_METHOD, "tls": False}
        channel = build_channel("grpc", table, "channels.tickets", {})
        assert isinstance(channel, GrpcCallChannel)
        try:
            # The executor wraps each step this way (reachstore_server/reach/executor.py).
            with otel.action_span("reach.action pending", "task-7", action.trace_id, {}):
                return await channel.submit(action)
        finally:
            await channel.close()

    with otel.using(provider):
        answer = asyncio.run(send())
    provider.shutdown()

    assert answer.status is Status.SUCCESS
    [call] = grpc_receiver.calls
    match = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01", call.metadata["traceparent"])
    assert match is not None, call.metadata["traceparent"]
    trace_id, parent = match.groups()
    assert trace_id == action.trace_id
    exported = {format(s.context.span_id, "016x"): s for s in spans.get_finished_spans()}
    assert parent in exported, sorted(s.name for s in exported.values())
    sent_by = exported[parent]
    assert format(sent_by.context.trace_id, "032x") == action.trace_id
    # Its parent is the action's step span, itself exported.
    assert sent_by.parent is not None
    assert format(sent_by.parent.span_id, "016x") in exported
