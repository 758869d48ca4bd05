"""NUL characters are refused in every request string, wherever it is nested."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.query.v1 import query_service_pb2 as query_pb
from reachstore.reach.v1 import reach_service_pb2 as reach_pb
from reachstore_server.common import errors, nul_strings


def _params(**values: object) -> struct_pb2.Struct:
    params = struct_pb2.Struct()
    params.update(values)
    return params


@pytest.mark.parametrize(
    ("request_message", "path"),
    [
        (
            ingest_pb.CreateDocumentRequest(
                namespace="n", document=ingest_pb.DocumentInput(text="a\x00b")
            ),
            "document.text",
        ),
        (
            ingest_pb.CreateDocumentRequest(
                namespace="n", document=ingest_pb.DocumentInput(text="ok", metadata={"k": "v\x00"})
            ),
            "document.metadata.k",
        ),
        (
            ingest_pb.BatchCreateDocumentsRequest(
                namespace="n\x00", documents=[ingest_pb.DocumentInput(text="fine")]
            ),
            "namespace",
        ),
        (query_pb.QueryRequest(namespaces=["a", "b\x00"], query="q"), "namespaces[1]"),
        (
            reach_pb.SubmitTaskRequest(
                entity_id="E",
                actions=[
                    reach_pb.ActionSpec(name="a", params=_params(order={"lines": ["x", "y\x00"]}))
                ],
            ),
            "actions[0].params.fields.order.struct_value.fields.lines.list_value.values[1]"
            ".string_value",
        ),
    ],
)
def test_the_first_string_with_a_nul_is_named(request_message: object, path: str) -> None:
    assert nul_strings.find(request_message) == path  # type: ignore[arg-type]
    with pytest.raises(errors.ReachstoreError) as raised:
        nul_strings.check(request_message)  # type: ignore[arg-type]
    assert raised.value.code == "INVALID_ARGUMENT"
    assert path in raised.value.failure.message


def test_a_map_key_with_a_nul_is_named_too() -> None:
    request = ingest_pb.CreateDocumentRequest(
        namespace="n", document=ingest_pb.DocumentInput(text="ok", metadata={"k\x00": "v"})
    )
    assert nul_strings.find(request) == "document.metadata['k\\x00']"


def test_requests_without_nul_pass() -> None:
    request = reach_pb.SubmitTaskRequest(
        entity_id="E", actions=[reach_pb.ActionSpec(name="a", params=_params(x="плохо 😀", n=1))]
    )
    assert nul_strings.find(request) is None
    nul_strings.check(request)


def test_a_batch_document_with_a_nul_is_left_to_its_handler_and_named_there() -> None:
    request = ingest_pb.BatchCreateDocumentsRequest(
        namespace="n",
        documents=[ingest_pb.DocumentInput(text="fine"), ingest_pb.DocumentInput(text="\x00")],
    )
    nul_strings.check(request)  # the batch as a whole is not refused
    nul_strings.check_item(request.documents[0], "documents[0]")
    with pytest.raises(errors.ReachstoreError) as raised:
        nul_strings.check_item(request.documents[1], "documents[1]")
    assert raised.value.field == "documents[1].text"


def test_zero_bytes_that_are_numbers_are_not_nuls_and_a_nul_beside_them_is_found() -> None:
    """The check skips the walk when the wire form has no zero byte; a request whose wire
    form has zero bytes from numbers (a double, an explicit 0 in a Struct) is walked, and
    a NUL among them is still named."""
    numbers = _params(score=0.0, limit=1.0, nested={"zero": 0})
    assert b"\x00" in numbers.SerializeToString()
    request = reach_pb.SubmitTaskRequest(
        entity_id="e", actions=[reach_pb.ActionSpec(name="a", params=numbers)]
    )
    nul_strings.check(request)  # no string holds a NUL
    request.actions[0].params["note"] = "a\x00b"
    with pytest.raises(errors.ReachstoreError) as raised:
        nul_strings.check(request)
    assert "actions[0].params" in raised.value.failure.message, raised.value.failure.message
