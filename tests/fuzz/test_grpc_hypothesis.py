"""Hypothesis-made protobuf messages over real gRPC, for every RPC of every service.

The services are found by walking the generated modules of the ``reachstore`` package;
each request message gets a strategy built from its descriptor: strings from short and
plausible to over a megabyte, integers across and at the edges of their type, floats with
NaN and infinities, enum numbers nobody defined, lists and maps empty, small or 100,000
entries long, and ``Struct`` parameters wide, nested and nested deeper than protobuf parses.
Every string field also gets what services parse out of strings (``parsed_strings.py``:
times at the calendar's edges, Unicode digits, integers longer than ``int()`` reads, page
tokens with a hostile inside). Strings that are not UTF-8 cannot be built as messages, so
they are written into the wire format directly. Every call must end OK or with a clear
status carrying our error details, never UNKNOWN, INTERNAL or a hang, and a bad argument
or an exhausted resource must name its field. Afterwards each service still answers its
health check and a normal call.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import hypothesis
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import strategies as st

import reachstore
from reachstore import _errors
from reachstore._rpc import SERVICES as HOSTS
from reachstore.query.v1 import query_service_pb2, query_service_pb2_grpc
from reachstore_server.common.grpc_server import MAX_MESSAGE_BYTES
from tests import wire_format
from tests.e2e.system import RunningSystem
from tests.fuzz.conftest import HOME
from tests.fuzz.parsed_strings import PARSED

_FD = FieldDescriptor
# A falsifying example may hold a megabyte string; printing it is slow but wanted.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
# RPCs with a valid base request get more examples: their mutations reach the deep checks;
# purely random requests mostly stop at the first one.
EXAMPLES_WITH_BASE = 40
EXAMPLES_RANDOM = 15
CALL_TIMEOUT_S = 20.0
MANY = 100_000
# A status that says clearly what happened; with our error details attached.
CLEAR = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
NAMING = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}
# Values the services give meaning to, so that generated requests get past the first
# check often enough to reach the deeper ones.
PLAUSIBLE = [
    "demo",
    "nope",
    "*",
    "fuzz-hook",
    "ping",
    "read",
    "ops",
    "refunds",
    "ticket",
    "fuzz",
    "2026-11-30T09:00:00Z",
    "0123456789abcdef0123456789abcdef",
    "rsk_0123456789abcdef_" + "a" * 43,
    "",
    " ",
    "\x00",
    "é" * 300,
    "语义存储",
    "a" * 129,
    # What a service parses out of a string: edge times, odd digits, hostile page tokens.
    *PARSED,
]
HUGE_TEXT = "x" * (1024 * 1024 + 1)


def _services() -> Iterator[tuple[Any, str]]:
    """Every service in the generated modules, with the server that hosts it."""
    hosts = {service.full_name: server for service, server in HOSTS}
    root = Path(reachstore.__file__).parent
    for file in sorted(root.rglob("*_pb2.py")):
        name = ".".join(("reachstore", *file.relative_to(root).with_suffix("").parts))
        module = importlib.import_module(name)
        for service in module.DESCRIPTOR.services_by_name.values():
            assert service.full_name in hosts, f"{service.full_name}: which server hosts it?"
            yield service, hosts[service.full_name]


METHODS: list[tuple[MethodDescriptor, str]] = sorted(
    ((method, server) for service, server in _services() for method in service.methods),
    key=lambda pair: pair[0].full_name,
)


# --- strategies from descriptors -----------------------------------------------------------

_INT_RANGES = {
    _FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    _FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}


def _strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(PLAUSIBLE),
        st.text(max_size=40),
        st.just("y" * 70_000),
        st.just(HUGE_TEXT),
    )


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(PLAUSIBLE),
        st.text(max_size=20),
    )
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"n": value}
    return value


def _structs() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.dictionaries(st.sampled_from(["ticket", "group", "note", "to"]), _json_values()),
        st.dictionaries(st.text(max_size=10), _json_values(), max_size=5),
        st.just(_deep(20)),  # deep, and still within what protobuf parses
        st.just(_deep(60)),  # each level is three messages: past protobuf's limit of 100
        st.just({f"k{i}": i for i in range(MANY)}),
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    cpp = field.cpp_type
    if cpp == _FD.CPPTYPE_STRING:
        if field.type == _FD.TYPE_BYTES:
            return st.binary(max_size=64) | st.just(b"\xff\xfe\xfd" * 1000)
        return _strings()
    if cpp in _INT_RANGES:
        low, high = _INT_RANGES[cpp]
        edges = [low, high, 0, 1, -1 if low < 0 else 2, 30_000, 2**31]
        return st.sampled_from([e for e in edges if low <= e <= high]) | st.integers(low, high)
    if cpp == _FD.CPPTYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if cpp == _FD.CPPTYPE_FLOAT:
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if cpp == _FD.CPPTYPE_BOOL:
        return st.booleans()
    if cpp == _FD.CPPTYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.sampled_from(known) | st.sampled_from([-7, 99, 2**31 - 1])  # open enums
    raise AssertionError(f"no strategy for {field.full_name}")


def _single(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return message_strategy(field.message_type, depth + 1)
    return _scalar(field)


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    entry = field.message_type
    if entry is not None and entry.full_name == "google.protobuf.Struct":
        return _structs()
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return st.one_of(
            st.dictionaries(_scalar(key), _single(value, depth), max_size=4),
            st.just({f"k{i}": "v" for i in range(MANY)}),
            st.just({"k" * 200: "v" * 5000}),
        )
    if field.is_repeated:
        if entry is not None:
            many: st.SearchStrategy[Any] = st.just([{}] * MANY)
        else:
            # Short values only: 100,000 copies of a megabyte would fill memory, not test.
            element = (
                st.sampled_from(PLAUSIBLE[:13])
                if field.cpp_type == _FD.CPPTYPE_STRING
                else _scalar(field)
            )
            many = element.map(lambda value: [value] * MANY)
        return st.one_of(st.lists(_single(field, depth), max_size=3), many)
    return _single(field, depth)


def message_strategy(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts of field values (a subset of the fields) that ``_build`` turns into a message."""
    if depth > 3:
        return st.just({})
    fields = {field.name: _field(field, depth) for field in descriptor.fields}
    return st.fixed_dictionaries({}, optional=fields)  # type: ignore[arg-type]


_ACTION = {"name": "a", "channel": "fuzz-hook", "action_type": "ping", "params": {"ticket": "t"}}
_EVENT = {
    "event_id": "fuzz-event",
    "time": "2026-12-01T00:00:00+00:00",
    "tenant": "fuzz",
    "service": "fuzz",
    "method": "Fuzz",
}
# A valid request for the RPCs with the most checks. Random messages rarely get past the
# first check; these, with one field (or one field of a sub-message) replaced by a
# generated value, reach every later check with hostile values. Documents go to a
# namespace that does not exist, so nothing generated is ever embedded.
BASES: dict[str, dict[str, Any]] = {
    "reachstore.admin.v1.KeyService.CreateKey": {"name": "fuzz", "scopes": ["read"]},
    "reachstore.query.v1.QueryService.Query": {"namespaces": [HOME], "query": "what?"},
    "reachstore.query.v1.QueryService.ListDocuments": {"namespace": HOME},
    "reachstore.ingest.v1.IngestService.CreateDocument": {
        "namespace": "nowhere",
        "document": {"document_id": "d", "text": "hello", "metadata": {"k": "v"}},
    },
    "reachstore.ingest.v1.IngestService.BatchCreateDocuments": {
        "namespace": "nowhere",
        "documents": [{"document_id": "d", "text": "hello", "metadata": {"k": "v"}}],
    },
    "reachstore.reach.v1.ReachService.SubmitTask": {
        "entity_id": "fuzz",
        "validate_only": True,
        "actions": [_ACTION],
    },
    "reachstore.reach.v1.ReachService.Reach": {"entity_id": "fuzz", "action": _ACTION},
    "reachstore.reach.v1.ReachService.ListActions": {"states": [1]},
    "reachstore.audit.v1.AuditService.AppendEvents": {"events": [_EVENT]},
    "reachstore.audit.v1.AuditService.ListEvents": {"service": "fuzz"},
    "reachstore.audit.v1.AuditService.Verify": {"from_seq": 1},
}


def _mutations(
    descriptor: Descriptor, base: dict[str, Any]
) -> Iterator[st.SearchStrategy[dict[str, Any]]]:
    """``base`` with one field, or one field of a sub-message it holds, generated."""
    for field in descriptor.fields:
        name = field.name
        yield _field(field, 0).map(lambda value, name=name: {**base, name: value})
        inner = base.get(name)
        entry = field.message_type
        if inner is None or entry is None or entry.full_name.startswith("google."):
            continue
        if entry.GetOptions().map_entry:
            continue
        if field.is_repeated:
            first, rest = inner[0], inner[1:]
            for sub in _mutations(entry, first):
                yield sub.map(lambda value, name=name, rest=rest: {**base, name: [value, *rest]})
        else:
            for sub in _mutations(entry, inner):
                yield sub.map(lambda value, name=name: {**base, name: value})


def request_strategy(method: MethodDescriptor) -> st.SearchStrategy[dict[str, Any]]:
    base = BASES.get(method.full_name)
    if base is None:
        return message_strategy(method.input_type)
    # One branch per mutated field, each as likely as a wholly random message.
    return st.one_of(
        st.just(base), message_strategy(method.input_type), *_mutations(method.input_type, base)
    )


def _fill(message: Message, values: dict[str, Any]) -> None:
    descriptor = message.DESCRIPTOR
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        entry = field.message_type
        target = getattr(message, name)
        if entry is not None and entry.full_name == "google.protobuf.Struct":
            target.update(value)
        elif field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            if entry.fields_by_name["value"].message_type is None:
                target.update(value)
            else:
                for key, item in value.items():
                    _fill(target[key], item)
        elif field.is_repeated and entry is not None:
            for item in value:
                _fill(target.add(), item)
        elif field.is_repeated:
            target.extend(value)
        elif entry is not None:
            target.SetInParent()
            _fill(target, value)
        else:
            setattr(message, name, value)


def _build(method: MethodDescriptor, values: dict[str, Any]) -> Message:
    message: Message = message_factory.GetMessageClass(method.input_type)()
    _fill(message, values)
    return message


# --- judging an answer ------------------------------------------------------------------


def _rich_details(exc: grpc.RpcError) -> list[Any]:
    status = _errors._status_from_trailers(exc)  # type: ignore[arg-type]
    return list(status.details) if status is not None else []


def _field_named(exc: grpc.RpcError) -> str:
    for detail in _rich_details(exc):
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            for violation in bad.field_violations:
                if violation.field:
                    return str(violation.field)
    decoded = _errors.from_rpc_error(exc)
    return str(decoded.structured_data.get("field") or "")


def _judge(exc: grpc.RpcError, request_size: int, where: str) -> None:
    code = exc.code()  # type: ignore[attr-defined]
    text = f"{where}: {code.name} {exc.details()!r}"  # type: ignore[attr-defined]
    if request_size > MAX_MESSAGE_BYTES:
        # Refused by the transport before any handler: no field to name.
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, text
        return
    assert code in CLEAR, text
    decoded = _errors.from_rpc_error(exc)
    assert decoded.code and decoded.category in {"auth", "permanent", "quota"}, text
    if code in NAMING:
        assert _field_named(exc), f"{text}: no field named"


def _metadata(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def _address(system: RunningSystem, server: str) -> str:
    offsets = {"query": 0, "ingest": 1, "reach": 2, "audit": 3}
    return f"127.0.0.1:{system.grpc_port_base + offsets[server]}"


@pytest.fixture(scope="module")
def channels(fuzz_system: RunningSystem) -> Iterator[dict[str, grpc.Channel]]:
    opened = {
        server: grpc.insecure_channel(
            _address(fuzz_system, server),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        for server in ("query", "ingest", "reach", "audit")
    }
    yield opened
    for channel in opened.values():
        channel.close()


def _caller(channel: grpc.Channel, method: MethodDescriptor) -> Callable[..., Any]:
    path = f"/{method.containing_service.full_name}/{method.name}"
    return channel.unary_unary(path, request_serializer=lambda raw: raw)


def _still_serving(channel: grpc.Channel, query_channel: grpc.Channel, key: str) -> None:
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    reply = query_service_pb2_grpc.QueryServiceStub(query_channel).Query(
        query_service_pb2.QueryRequest(namespaces=[HOME], query="what is here?", top_k=1),
        timeout=10,
        metadata=_metadata(key),
    )
    assert list(reply.meta.namespaces_succeeded) == [HOME]


# --- the tests ----------------------------------------------------------------------------


def test_every_service_of_the_generated_modules_is_fuzzed() -> None:
    services = {method.containing_service.full_name for method, _ in METHODS}
    assert {service.full_name for service, _ in HOSTS} <= services
    assert len(METHODS) >= 30
    assert set(BASES) <= {method.full_name for method, _ in METHODS}


@pytest.mark.parametrize(
    ("method", "server"), METHODS, ids=[m.full_name.removeprefix("reachstore.") for m, _ in METHODS]
)
def test_generated_requests_get_a_clear_answer(
    method: MethodDescriptor, server: str, channels: dict[str, grpc.Channel], fuzz_key: str
) -> None:
    call = _caller(channels[server], method)

    @hypothesis.settings(
        max_examples=EXAMPLES_WITH_BASE if method.full_name in BASES else EXAMPLES_RANDOM,
        derandomize=True,  # the same examples on every run: CI failures reproduce
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(values=request_strategy(method))
    def one(values: dict[str, Any]) -> None:
        raw = _build(method, values).SerializeToString()
        try:
            call(raw, timeout=CALL_TIMEOUT_S, metadata=_metadata(fuzz_key))
        except grpc.RpcError as exc:
            _judge(exc, len(raw), method.full_name)

    one()
    _still_serving(channels[server], channels["query"], fuzz_key)


def _edges(field: FieldDescriptor) -> list[Any]:
    """The values at the edges of what a field can hold, for the systematic sweep."""
    entry = field.message_type
    if entry is not None and entry.full_name == "google.protobuf.Struct":
        return [_deep(60), {"note": "v" * 70_000}, {f"k{i}": i for i in range(MANY)}]
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        return [{f"k{i}": "v" for i in range(MANY)}, {"k" * 200: "v" * 5000}, {"": ""}]
    if field.is_repeated:
        item: Any = {} if entry is not None else ("demo" if field.type == _FD.TYPE_STRING else 1)
        return [[], [item] * MANY]
    if entry is not None:
        return [{}]
    cpp = field.cpp_type
    if cpp in _INT_RANGES:
        low, high = _INT_RANGES[cpp]
        return [low, high] + ([-1] if low < 0 else [])
    if cpp in (_FD.CPPTYPE_DOUBLE, _FD.CPPTYPE_FLOAT):
        return [float("nan"), float("inf"), -float("inf")]
    if cpp == _FD.CPPTYPE_BOOL:
        return [True]
    if cpp == _FD.CPPTYPE_ENUM:
        return [99, -7]
    if field.type == _FD.TYPE_BYTES:
        return [b"\xff\xfe" * 1000]
    return [HUGE_TEXT, "y" * 70_000, "", "\x00", *PARSED]


def _edge_requests(
    descriptor: Descriptor, base: dict[str, Any], prefix: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``base`` with each field in turn (and each field of the sub-messages it holds) set
    to each of its edge values."""
    for field in descriptor.fields:
        name = field.name
        for value in _edges(field):
            yield f"{prefix}{name}", {**base, name: value}
        inner = base.get(name)
        entry = field.message_type
        if inner is None or entry is None or entry.full_name.startswith("google."):
            continue
        if entry.GetOptions().map_entry:
            continue
        if field.is_repeated:
            for path, sub in _edge_requests(entry, inner[0], f"{prefix}{name}[0]."):
                yield path, {**base, name: [sub, *inner[1:]]}
        else:
            for path, sub in _edge_requests(entry, inner, f"{prefix}{name}."):
                yield path, {**base, name: sub}


BASED = [(method, server) for method, server in METHODS if method.full_name in BASES]


@pytest.mark.parametrize(
    ("method", "server"), BASED, ids=[m.full_name.removeprefix("reachstore.") for m, _ in BASED]
)
def test_every_field_at_its_edges_gets_a_clear_answer(
    method: MethodDescriptor, server: str, channels: dict[str, grpc.Channel], fuzz_key: str
) -> None:
    """Not left to chance: enormous and negative numbers, NaN, unknown enum values, huge,
    empty and NUL strings, empty and 100,000-entry lists and maps, deep and wide Structs,
    one field at a time in an otherwise valid request."""
    call = _caller(channels[server], method)
    sent = 0
    for path, values in _edge_requests(method.input_type, BASES[method.full_name]):
        raw = _build(method, values).SerializeToString()
        try:
            call(raw, timeout=CALL_TIMEOUT_S, metadata=_metadata(fuzz_key))
        except grpc.RpcError as exc:
            _judge(exc, len(raw), f"{method.full_name} {path}")
        sent += 1
    assert sent >= 5
    _still_serving(channels[server], channels["query"], fuzz_key)


def _string_fields(
    descriptor: Descriptor, prefix: bytes = b"", depth: int = 0
) -> Iterator[tuple[str, bytes]]:
    """(field path, the wire bytes of a message whose string at that path is not UTF-8),
    for the string fields of the request and of the messages it holds, two levels deep."""
    for field in descriptor.fields:
        entry = field.message_type
        if field.type == _FD.TYPE_STRING:
            yield field.name, _wrap(prefix, wire_format.length_field(field.number, b"ok\xff\xfe"))
        elif entry is not None and depth < 2 and not entry.full_name.startswith("google."):
            for path, inner in _string_fields(entry, b"", depth + 1):
                yield (
                    f"{field.name}.{path}",
                    _wrap(prefix, wire_format.length_field(field.number, inner)),
                )


def _wrap(prefix: bytes, data: bytes) -> bytes:
    return prefix + data


@pytest.mark.parametrize(
    ("method", "server"), METHODS, ids=[m.full_name.removeprefix("reachstore.") for m, _ in METHODS]
)
def test_strings_that_are_not_utf8_are_named(
    method: MethodDescriptor, server: str, channels: dict[str, grpc.Channel], fuzz_key: str
) -> None:
    call = _caller(channels[server], method)
    cases = list(_string_fields(method.input_type))
    cases.append(("request", b"\xff\xff\xff\xff"))  # not protobuf at all
    cases.append(("request", struct.pack("<B", 0x0A) + wire_format.varint(10) + b"ab"))  # cut short
    for path, raw in cases:
        with pytest.raises(grpc.RpcError) as caught:
            call(raw, timeout=CALL_TIMEOUT_S, metadata=_metadata(fuzz_key))
        exc = caught.value
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, exc.details())  # type: ignore[attr-defined]
        named = _field_named(exc)
        if path != "request":
            # Map entries and repeated fields name their index too: `metadata[0].key`.
            assert named.replace("[0]", "") == path, (path, named)
        else:
            assert named, path
    _still_serving(channels[server], channels["query"], fuzz_key)


def test_a_frame_over_the_message_limit_is_refused_and_the_server_keeps_serving(
    channels: dict[str, grpc.Channel], fuzz_key: str
) -> None:
    # A CreateDocument whose text alone is over the limit, sent as raw bytes.
    text = b"z" * (MAX_MESSAGE_BYTES + 1024)
    document = wire_format.length_field(2, text)  # DocumentInput.text
    raw = wire_format.length_field(1, b"demo") + wire_format.length_field(2, document)
    path = "/reachstore.ingest.v1.IngestService/CreateDocument"
    call = channels["ingest"].unary_unary(path, request_serializer=lambda r: r)
    with pytest.raises(grpc.RpcError) as caught:
        call(raw, timeout=CALL_TIMEOUT_S, metadata=_metadata(fuzz_key))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    _still_serving(channels["ingest"], channels["query"], fuzz_key)
    # And a normal write on the same channel goes through.
    ok = channels["ingest"].unary_unary(
        "/reachstore.ingest.v1.IngestService/GetNamespace",
        request_serializer=lambda r: r,
        response_deserializer=lambda r: r,
    )
    ok(
        wire_format.length_field(1, HOME.encode()),
        timeout=CALL_TIMEOUT_S,
        metadata=_metadata(fuzz_key),
    )
