"""The JSON profile both ways: what callers read, and how strictly what they send is read."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import message_factory

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb2
from reachstore.query.v1 import query_service_pb2 as query_pb2
from reachstore_server.bridge import json_codec
from reachstore_server.common import errors

# --- out ----------------------------------------------------------------------------------


def test_enums_render_as_lowercase_words_without_prefix() -> None:
    task = ingest_pb2.Task(
        state=ingest_pb2.TASK_STATE_QUEUED,
        agent_decision_hint=ingest_pb2.AGENT_DECISION_HINT_DONE_FETCH_DOC,
        error=pf_pb2.PartialFailure(category=pf_pb2.CATEGORY_PERMANENT),
    )
    out = json_codec.message_to_dict(task)
    assert out["state"] == "queued"
    assert out["agent_decision_hint"] == "done_fetch_doc"
    assert out["phase"] == "unspecified"
    assert out["error"]["category"] == "permanent"


def test_acronym_enum_type_names_split_into_words(sample_file: Any) -> None:
    enum = sample_file.enum_types_by_name["HTTPMode"]
    assert json_codec.enum_words(enum) == ["unspecified", "fast_lane"]


def test_absent_optional_is_null_and_present_zero_is_printed() -> None:
    absent = json_codec.message_to_dict(pf_pb2.PartialFailure())
    assert absent["retry_after_ms"] is None
    assert absent["batch_index"] is None
    present = pf_pb2.PartialFailure(batch_index=0, retry_after_ms=0)
    out = json_codec.message_to_dict(present)
    assert out["batch_index"] == 0
    assert out["retry_after_ms"] == 0


def test_zero_values_empty_lists_maps_and_unset_messages_are_printed() -> None:
    out = json_codec.message_to_dict(query_pb2.GetDocumentResponse(document=query_pb2.Document()))
    assert out == {
        "document": {
            "namespace": "",
            "document_id": "",
            "text": "",
            "metadata": {},
            "chunk_count": 0,
            "content_sha256": "",
            "updated_at": "",
        },
        "partial_failures": [],
    }
    assert json_codec.message_to_dict(ingest_pb2.GetTaskResponse())["task"] is None


def test_unset_struct_prints_as_empty_object() -> None:
    assert json_codec.message_to_dict(pf_pb2.PartialFailure())["structured_data"] == {}


def test_struct_prints_as_plain_json_with_integral_numbers_as_integers() -> None:
    failure = errors.make_failure(
        errors.BATCH_TOO_LARGE,
        structured_data={
            "limit": 100,
            "ratio": 0.5,
            "nested": {"ok": True, "list": [1, "a", None]},
        },
    )
    assert json_codec.message_to_dict(failure)["structured_data"] == {
        "limit": 100,
        "ratio": 0.5,
        "nested": {"ok": True, "list": [1, "a", None]},
    }


def test_int64_stays_a_json_number_and_doubles_are_numbers() -> None:
    namespace = ingest_pb2.Namespace(document_count=2**40, chunk_count=-1)
    out = json_codec.message_to_dict(namespace)
    assert out["document_count"] == 2**40 and isinstance(out["document_count"], int)
    meta = json_codec.message_to_dict(query_pb2.QueryMeta(coverage_ratio=0.5))
    assert meta["coverage_ratio"] == 0.5
    assert json.loads(json.dumps(out)) == out


def test_maps_bytes_float_and_non_finite_numbers(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    sample = sample_class(u64=2**64 - 1, f32=0.1, raw=b"\x00\xff", by_id={7: "seven"})
    sample.flags[True].u64 = 1
    sample.child.f32 = float("inf")
    out = json_codec.message_to_dict(sample)
    assert out["u64"] == 2**64 - 1
    assert out["f32"] == 0.1  # not 0.10000000149011612
    assert out["raw"] == "AP8="
    assert out["by_id"] == {"7": "seven"}
    assert out["flags"]["true"]["u64"] == 1
    assert out["child"]["f32"] == "Infinity"
    assert out["text_choice"] is None and out["number_choice"] is None
    assert out["mode"] == "unspecified"


# --- in -----------------------------------------------------------------------------------


def _parse(message_class: Any, data: Any) -> Any:
    return json_codec.message_from_dict(message_class.DESCRIPTOR, data)


def _error(message_class: Any, data: Any) -> errors.ReachstoreError:
    with pytest.raises(errors.ReachstoreError) as caught:
        _parse(message_class, data)
    assert caught.value.code == "INVALID_ARGUMENT"
    return caught.value


def _data(error: errors.ReachstoreError) -> dict[str, Any]:
    return json_codec.message_to_dict(error.failure)["structured_data"]


def test_valid_body_builds_the_message() -> None:
    request = _parse(
        ingest_pb2.BatchCreateDocumentsRequest,
        {
            "namespace": "demo",
            "documents": [{"document_id": "a", "text": "x", "metadata": {"k": "v"}}],
            "on_duplicate": "overwrite",
        },
    )
    assert request.documents[0].metadata == {"k": "v"}
    assert request.on_duplicate == ingest_pb2.ON_DUPLICATE_OVERWRITE


def test_lower_camel_case_json_names_are_accepted_at_every_depth() -> None:
    # proto3 JSON: parsers accept the proto field name and the lowerCamelCase JSON name.
    request = _parse(
        ingest_pb2.BatchCreateDocumentsRequest,
        {
            "namespace": "demo",
            "documents": [{"documentId": "a", "text": "x"}, {"document_id": "b", "text": "y"}],
            "onDuplicate": "overwrite",
        },
    )
    assert [d.document_id for d in request.documents] == ["a", "b"]
    assert request.on_duplicate == ingest_pb2.ON_DUPLICATE_OVERWRITE
    query = _parse(query_pb2.QueryRequest, {"topK": 5, "timeoutMs": 70, "allowPartial": False})
    assert (query.top_k, query.timeout_ms) == (5, 70)
    assert query.HasField("allow_partial") and not query.allow_partial


def test_camel_case_names_cover_maps_and_oneofs(sample_file: Any) -> None:
    sample = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    parsed = json_codec.message_from_dict(
        sample.DESCRIPTOR, {"byId": {"7": "seven"}, "child": {"textChoice": "t"}}
    )
    assert parsed.by_id[7] == "seven"
    assert parsed.child.text_choice == "t"
    with pytest.raises(errors.ReachstoreError) as caught:
        json_codec.message_from_dict(sample.DESCRIPTOR, {"textChoice": "a", "number_choice": 1})
    assert _data(caught.value)["conflicts_with"] == "textChoice"


@pytest.mark.parametrize("second", [5, None])
def test_a_field_given_under_both_its_names_is_refused(second: Any) -> None:
    error = _error(query_pb2.QueryRequest, {"top_k": 5, "topK": second, "query": "q"})
    assert _data(error) == {
        "field": "topK",
        "rule": "field top_k given twice, as 'top_k' and 'topK'; proto3 JSON accepts either "
        "its name or its lowerCamelCase JSON name, not both",
        "conflicts_with": "top_k",
    }
    assert error.failure.message.startswith("topK: field top_k given twice")


def test_both_names_in_a_nested_item_are_named_by_its_path() -> None:
    error = _error(
        ingest_pb2.BatchCreateDocumentsRequest,
        {"documents": [{"text": "a"}, {"documentId": "b", "text": "b", "document_id": "b"}]},
    )
    assert _data(error)["field"] == "documents[1].document_id"
    assert _data(error)["conflicts_with"] == "documents[1].documentId"


def test_enum_accepts_full_upper_name() -> None:
    request = _parse(ingest_pb2.CreateDocumentRequest, {"on_duplicate": "ON_DUPLICATE_SKIP"})
    assert request.on_duplicate == ingest_pb2.ON_DUPLICATE_SKIP


def test_unknown_enum_word_lists_allowed_words() -> None:
    error = _error(ingest_pb2.CreateDocumentRequest, {"on_duplicate": "replace"})
    data = _data(error)
    assert data["field"] == "on_duplicate"
    assert data["allowed"] == ["unspecified", "skip", "overwrite", "error"]
    assert "replace" in error.failure.message


def test_enum_given_a_number_is_refused() -> None:
    data = _data(_error(ingest_pb2.CreateDocumentRequest, {"on_duplicate": 2}))
    assert data["expected"] == "enum word"


def test_unknown_field_is_named_by_its_full_path() -> None:
    error = _error(
        ingest_pb2.BatchCreateDocumentsRequest,
        {
            "documents": [{"text": "a"}, {"text": "b"}, {"txt": "c"}],
        },
    )
    assert _data(error) == {"field": "documents[2].txt", "rule": "unknown field"}
    assert error.failure.message == "documents[2].txt: unknown field"


@pytest.mark.parametrize(
    ("data", "field", "expected", "got"),
    [
        ({"top_k": "10"}, "top_k", "integer", "string"),
        ({"top_k": True}, "top_k", "integer", "boolean"),
        ({"query": 5}, "query", "string", "number"),
        ({"namespaces": "demo"}, "namespaces", "array", "string"),
        ({"namespaces": ["a", 1]}, "namespaces[1]", "string", "number"),
        ({"namespaces": [None]}, "namespaces[0]", "string", "null"),
        ({"filter": ["a"]}, "filter", "object", "array"),
        ({"filter": {"lang": 1}}, "filter.lang", "string", "number"),
        ({"allow_partial": "yes"}, "allow_partial", "boolean", "string"),
        ({"allow_partial": 1}, "allow_partial", "boolean", "number"),
    ],
)
def test_wrong_type_names_field_and_expected_type(
    data: dict[str, Any], field: str, expected: str, got: str
) -> None:
    found = _data(_error(query_pb2.QueryRequest, data))
    assert found["field"] == field
    assert found["expected"] == expected
    assert found["got"] == got


def test_nested_message_given_a_scalar_is_refused() -> None:
    data = _data(_error(ingest_pb2.CreateDocumentRequest, {"document": "text"}))
    assert data["field"] == "document"
    assert data["expected"] == "object"


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 1e12, float("inf")])
def test_int32_out_of_range_is_refused(value: float) -> None:
    data = _data(_error(query_pb2.QueryRequest, {"top_k": value}))
    assert data["rule"] == "integer out of int32 range"
    assert data["maximum"] == 2**31 - 1


def test_int64_out_of_range_is_refused(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    data = _data(_error(sample_class, {"u64": -1}))
    assert data["rule"] == "integer out of uint64 range"
    assert _data(_error(sample_class, {"u64": 2**64}))["field"] == "u64"


def test_non_integral_number_for_integer_field_is_refused() -> None:
    data = _data(_error(query_pb2.QueryRequest, {"top_k": 2.5}))
    assert data["field"] == "top_k"
    assert "fraction" in data["rule"]


def test_integral_float_is_accepted_for_integer_field() -> None:
    assert _parse(query_pb2.QueryRequest, {"top_k": 10.0}).top_k == 10


def test_null_leaves_the_field_unset() -> None:
    request = _parse(query_pb2.QueryRequest, {"allow_partial": None, "query": None})
    assert not request.HasField("allow_partial")
    assert request.query == ""


def test_explicit_false_sets_an_optional_field() -> None:
    request = _parse(query_pb2.QueryRequest, {"allow_partial": False})
    assert request.HasField("allow_partial") and request.allow_partial is False


def test_empty_object_marks_a_message_field_present() -> None:
    assert _parse(ingest_pb2.CreateDocumentRequest, {"document": {}}).HasField("document")


def test_body_that_is_not_an_object_is_refused() -> None:
    assert _data(_error(query_pb2.QueryRequest, ["a"]))["field"] == "body"


def test_struct_accepts_any_object_and_refuses_an_array(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    sample = _parse(sample_class, {"data": {"a": [1, {"b": None}]}})
    assert json_codec.message_to_dict(sample)["data"] == {"a": [1, {"b": None}]}
    assert _data(_error(sample_class, {"child": {"data": [1]}}))["field"] == "child.data"


def test_map_keys_are_converted_and_checked(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    assert dict(_parse(sample_class, {"by_id": {"12": "x"}}).by_id) == {12: "x"}
    assert _data(_error(sample_class, {"by_id": {"x": "y"}}))["field"] == "by_id.x"
    nested = _data(_error(sample_class, {"flags": {"true": {"nope": 1}}}))
    assert nested["field"] == "flags.true.nope"


def test_two_members_of_one_oneof_are_refused(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    data = _data(_error(sample_class, {"text_choice": "a", "number_choice": 1}))
    assert data["field"] == "number_choice"
    assert data["conflicts_with"] == "text_choice"


def test_bytes_take_base64_and_refuse_garbage(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    assert _parse(sample_class, {"raw": "AP8"}).raw == b"\x00\xff"
    assert _parse(sample_class, {"raw": "_w=="}).raw == b"\xff"
    assert _data(_error(sample_class, {"raw": "!!"}))["expected"] == "base64 string"


def test_float32_overflow_is_refused(sample_file: Any) -> None:
    sample_class = message_factory.GetMessageClass(sample_file.message_types_by_name["Sample"])
    assert _data(_error(sample_class, {"f32": 1e39}))["rule"] == "number out of float range"
    assert _parse(sample_class, {"f32": 3}).f32 == 3.0


def test_round_trip_of_a_response_through_the_profile() -> None:
    response = ingest_pb2.GetTaskResponse(
        task=ingest_pb2.Task(
            task_id="t",
            state=ingest_pb2.TASK_STATE_FAILED,
            poll_after_ms=5,
            error=errors.make_failure(errors.DOCUMENT_EXISTS, structured_data={"id": "d"}),
        )
    )
    assert _parse(ingest_pb2.GetTaskResponse, json_codec.message_to_dict(response)) == response
