"""Media types and the strict JSON parse of request bodies."""

from __future__ import annotations

from typing import Any

import pytest

from reachstore_server.bridge import http_body, json_codec
from reachstore_server.common import errors


@pytest.mark.parametrize(
    ("content_type", "accepted"),
    [
        ("application/json", True),
        ("Application/JSON; charset=UTF-8", True),
        ('application/json; charset="utf-8"', True),
        ("application/merge-patch+json", True),
        ("application/json; charset=latin-1", False),
        ("text/plain", False),
        ("application/x-www-form-urlencoded", False),
        ("", False),
        (None, False),
    ],
)
def test_json_media_types(content_type: str | None, accepted: bool) -> None:
    assert http_body.is_json_media_type(content_type) is accepted


def _malformed(body: bytes) -> tuple[str, dict[str, Any]]:
    with pytest.raises(errors.ReachstoreError) as caught:
        http_body.parse_json_object(body)
    assert caught.value.code == "MALFORMED_JSON"
    return caught.value.failure.message, json_codec.message_to_dict(caught.value.failure)[
        "structured_data"
    ]


def test_syntax_error_reports_line_and_column() -> None:
    message, data = _malformed(b'{"a": 1,\n "b": }')
    assert (data["line"], data["column"]) == (2, 7)
    assert "line 2 column 7" in message


def test_non_object_json_says_an_object_is_required() -> None:
    message, data = _malformed(b"[1, 2]")
    assert message == "the body must be a JSON object, got array"
    assert data == {"expected": "object", "got": "array"}


def test_duplicate_keys_are_refused() -> None:
    message, data = _malformed(b'{"a": 1, "a": 2}')
    assert data == {"duplicate_key": "a"}


def test_nan_literal_is_refused() -> None:
    message, _ = _malformed(b'{"a": NaN}')
    assert "NaN" in message


def test_invalid_utf8_is_refused() -> None:
    _, data = _malformed(b'{"a": "\xff"}')
    assert data == {"position": 7}


def test_deep_nesting_is_refused_not_crashing() -> None:
    message, _ = _malformed(b"[" * 100_000 + b"]" * 100_000)
    assert "nested too deeply" in message


def test_object_parses() -> None:
    assert http_body.parse_json_object('{"q": "é"}'.encode()) == {"q": "é"}
