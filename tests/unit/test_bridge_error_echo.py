"""The bridge's own error answers cut what they echo, as gRPC statuses do
(reachstore_server/common/errors.py ``fitted``): a body with a 20 MiB key of backslashes
was answered 400 with a 40 MiB body, the key in the message and again as the field."""

from __future__ import annotations

import json

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore_server.bridge import error_responses, http_body, json_codec
from reachstore_server.common import errors


def test_an_error_echoing_a_huge_key_is_answered_in_kilobytes() -> None:
    key = "\\\\" * (1024 * 1024)
    body = http_body.parse_json_object(json.dumps({key: 1}).encode())
    try:
        json_codec.fill_message(pb.CreateNamespaceRequest(), body)
    except errors.ReachstoreError as exc:
        error = exc
    else:
        raise AssertionError("an unknown field was accepted")
    response = error_responses.from_error(error, "r1")
    assert response.status_code == 400
    assert len(response.body) < 16 * 1024, len(response.body)
    answer = json.loads(response.body)["error"]
    assert answer["code"] == "INVALID_ARGUMENT"
    assert f"({len(key)} characters)" in answer["structured_data"]["field"]


def test_a_short_error_is_answered_as_it_is() -> None:
    error = errors.invalid("name", "must not be empty")
    answer = json.loads(error_responses.from_error(error, "r2").body)["error"]
    assert answer["message"] == "name: must not be empty"
    assert answer["structured_data"] == {"field": "name", "rule": "must not be empty"}
