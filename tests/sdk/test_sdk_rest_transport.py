"""The REST transport's two halves, checked against the bridge's own code for every RPC:
the HTTP request built from a request message must be routed and decoded by the bridge
back into that very message, and every response the bridge renders must parse back into
the message it rendered. Then the edges: answers that are not the bridge's."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from reachstore import InvalidArgumentError, ReachstoreError, TransientError
from reachstore._rpc import RPCS, Rpc
from reachstore._transport_rest import http_call, http_rule, read_response
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.request_builder import build_request
from reachstore_server.bridge.routes import RouteTable

_FD = FieldDescriptor
TABLE = RouteTable(DEFAULT_SERVICES)


def _scalar(field: FieldDescriptor, salt: int) -> Any:
    cpp = field.cpp_type
    if cpp == _FD.CPPTYPE_STRING:
        # Characters that need care in a path or a query: "/", space, "%", ":", non-ASCII.
        return f"{field.name} {salt}/ü%:x"
    if cpp == _FD.CPPTYPE_BOOL:
        return True
    if cpp == _FD.CPPTYPE_ENUM:
        return field.enum_type.values[-1].number
    if cpp in (_FD.CPPTYPE_INT64, _FD.CPPTYPE_UINT64):
        return 2**40 + salt  # above 2**32: must travel as a JSON number, not a string
    if cpp in (_FD.CPPTYPE_INT32, _FD.CPPTYPE_UINT32):
        return 7 + salt
    return 0.5 + salt


def _fill(message: Message, depth: int = 0) -> Message:
    """Every field of ``message`` set to a sample value, recursively (two items per list)."""
    descriptor: Descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            getattr(message, field.name)["k"] = _scalar(value_field, 0)
        elif field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.Struct":
                items = [getattr(message, field.name)]
                if field.is_repeated:
                    items = [getattr(message, field.name).add()]
                for struct in items:
                    assert isinstance(struct, struct_pb2.Struct)
                    struct.update({"text": "v", "count": 3, "nested": {"ok": True}, "list": [1]})
            elif depth < 3:
                if field.is_repeated:
                    for _ in range(2):
                        _fill(getattr(message, field.name).add(), depth + 1)
                else:
                    _fill(getattr(message, field.name), depth + 1)
        elif field.is_repeated:
            getattr(message, field.name).extend([_scalar(field, 1), _scalar(field, 2)])
        else:
            setattr(message, field.name, _scalar(field, 0))
    return message


def _request_class(rpc: Rpc) -> type[Message]:
    return json_codec.message_class(rpc.method.input_type)


@pytest.mark.parametrize("rpc", list(RPCS.values()), ids=lambda r: r.name)
@pytest.mark.parametrize("filled", [True, False], ids=["filled", "empty"])
def test_the_bridge_routes_and_decodes_every_request_back_to_the_message(
    rpc: Rpc, filled: bool
) -> None:
    request = _request_class(rpc)()
    if filled:
        _fill(request)
    elif "{" in http_rule(rpc.method).template:
        # An empty id cannot be put in a URL; the SDK says so instead of sending another URL.
        with pytest.raises(ValueError, match="must not be empty"):
            http_call(rpc, request)
        return

    call = http_call(rpc, request)

    match = TABLE.match(call.verb, call.path)
    assert match.route is not None, (call.verb, call.path)
    assert match.route.method.full_name == rpc.method.full_name
    # The body goes through JSON text exactly as it does on the wire.
    body = json.loads(json.dumps(call.body)) if call.body is not None else None
    rebuilt = build_request(match.route, body, match.path_params, list(call.query))
    assert rebuilt == request


@pytest.mark.parametrize("rpc", list(RPCS.values()), ids=lambda r: r.name)
@pytest.mark.parametrize("filled", [True, False], ids=["filled", "empty"])
def test_every_response_the_bridge_renders_parses_back_to_the_message(
    rpc: Rpc, filled: bool
) -> None:
    response = rpc.response_class()
    if filled:
        _fill(response)
    rendered = json.dumps(json_codec.message_to_dict(response)).encode()

    assert read_response(rpc, 200, httpx.Headers(), rendered) == response


def test_path_variables_are_encoded_so_a_slash_stays_inside_its_segment() -> None:
    rpc = RPCS["ReachService.CancelAction"]
    call = http_call(rpc, reach_pb2.CancelActionRequest(action_id="a/b c"))
    assert (call.verb, call.path, call.query, call.body) == (
        "POST",
        "/api/v1/reach/actions/a%2Fb%20c:cancel",
        (),
        {},
    )


def test_get_routes_send_set_fields_as_query_parameters_and_leave_defaults_out() -> None:
    rpc = RPCS["ReachService.ListTasks"]
    request = reach_pb2.ListTasksRequest(
        state=reach_pb2.TASK_STATE_RUNNING, entity_id="WO-1", page_size=5
    )
    call = http_call(rpc, request)
    assert (call.verb, call.path, call.body) == ("GET", "/api/v1/reach/tasks", None)
    assert sorted(call.query) == [
        ("entity_id", "WO-1"),
        ("page_size", "5"),
        ("state", "TASK_STATE_RUNNING"),
    ]


def test_lowercase_enums_nulls_and_unknown_fields_are_read() -> None:
    rpc = RPCS["ReachService.Reach"]
    answer = {
        "task_id": "t1",
        "state": "pending",
        "deduplicated": False,
        "partial_failures": [
            {"category": "timeout", "retryable": True, "retry_after_ms": 1500},
            {"category": "permanent", "retry_after_ms": None, "structured_data": {}},
            # A newer server's word and field: left unset and ignored, not an error.
            {"category": "cosmic_rays", "newer_field": 1},
        ],
        "newer_top_level_field": {"x": 1},
    }
    parsed = read_response(rpc, 202, httpx.Headers(), json.dumps(answer).encode())
    assert isinstance(parsed, reach_pb2.ReachResponse)
    assert parsed.state == reach_pb2.ACTION_STATE_PENDING
    first, second, third = parsed.partial_failures
    assert first.retry_after_ms == 1500 and first.category == 4
    assert not second.HasField("retry_after_ms")
    assert third.category == 0


def test_an_answer_that_is_not_the_messages_json_is_a_retryable_internal_error() -> None:
    rpc = RPCS["ReachService.GetAction"]
    with pytest.raises(TransientError) as caught:
        read_response(rpc, 200, httpx.Headers(), b"<html>hello</html>")
    assert caught.value.code == "INTERNAL" and caught.value.retryable


def test_an_error_page_from_a_proxy_becomes_the_error_of_its_status() -> None:
    rpc = RPCS["QueryService.Query"]
    with pytest.raises(TransientError) as caught:
        read_response(rpc, 502, httpx.Headers({"content-type": "text/html"}), b"Bad Gateway")
    error = caught.value
    assert (error.code, error.retryable) == ("SERVICE_UNAVAILABLE", True)
    assert error.retry_after_ms == 1000
    assert error.http_status == 502 and error.structured_data == {"http_status": 502}


def test_a_retryable_error_without_a_wait_in_the_body_takes_retry_after() -> None:
    body = {"error": {"code": "RATE_LIMITED", "category": "quota", "retryable": True}}
    with pytest.raises(ReachstoreError) as caught:
        read_response(
            RPCS["QueryService.Query"],
            429,
            httpx.Headers({"Retry-After": "3"}),
            json.dumps(body).encode(),
        )
    assert caught.value.retry_after_ms == 3000 and caught.value.category == "quota"


def test_a_400_naming_a_field_of_the_catalogue_is_an_invalid_argument() -> None:
    body = {
        "error": {
            "code": "INVALID_ARGUMENT",
            "message": "top_k: must be between 1 and 100",
            "category": "permanent",
            "retryable": False,
            "retry_after_ms": None,
            "structured_data": {"field": "top_k", "rule": "1..100"},
            "request_id": "r",
            "details": [],
        }
    }
    with pytest.raises(InvalidArgumentError) as caught:
        read_response(RPCS["QueryService.Query"], 400, httpx.Headers(), json.dumps(body).encode())
    assert caught.value.structured_data == {"field": "top_k", "rule": "1..100"}
