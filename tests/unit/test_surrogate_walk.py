"""The bridge's walk of a body (reachstore_server/bridge/http_body.py): lone surrogates
and the count of values. It spelled ``a.a.a...[i]`` for each value, so a 2 MiB body of a
million zeros 800 objects deep took 1.7 GiB, kept after the answer."""

from __future__ import annotations

import tracemalloc

import pytest

from reachstore_server.bridge import http_body
from reachstore_server.common import errors


def _deep(values: int, depth: int) -> bytes:
    body = '{"z": [' + ",".join(["0"] * values) + '], "e": "\\ud83d\\ude00"}'
    for _ in range(depth):
        body = '{"a": ' + body + "}"
    return body.encode()


def test_the_walk_holds_one_entry_per_level_not_a_path_per_value() -> None:
    body = _deep(100_000, 800)
    tracemalloc.start()
    try:
        parsed = http_body.parse_json_object(body)
        # What the walk itself allocates, on top of the parsed body.
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        http_body._walk(parsed, http_body.MAX_JSON_VALUES, surrogates=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Before: 100,000 paths of about 1.6 KB each (160 MB); now a frame per level.
    assert peak - start < 2 * 2**20, peak - start


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"a": {"b": [1, "x\\ud800"]}}', "a.b[1]"),
        ('{"a": [{"\\ud800": 1}]}', "a[0]"),
        ('{"\\udc00": 1}', "body"),
        ('{"t": "ok", "u": ["\\udfff"]}', "u[0]"),
    ],
)
def test_the_first_lone_surrogate_is_named_by_its_path(body: str, field: str) -> None:
    with pytest.raises(errors.ReachstoreError) as refused:
        http_body.parse_json_object(body.encode())
    assert refused.value.failure.error_code == "INVALID_ARGUMENT"
    assert str(refused.value).startswith(f"{field}: "), refused.value


LIMIT = http_body.MAX_JSON_VALUES


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # Objects are counted as the parser makes them: the parse stops at the first over.
        (b'{"documents": [' + b",".join([b"{}"] * LIMIT) + b"]}", "body"),
        # Arrays and scalars are counted by the walk after the parse.
        (b'{"namespaces": [' + b",".join([b'""'] * LIMIT) + b"]}", f"namespaces[{LIMIT - 2}]"),
        (b'{"p": {"l": [[1, 2], ' + b",".join([b"[0]"] * (LIMIT // 2)) + b"]}}", "p.l[99998]"),
    ],
    ids=["objects", "strings", "nested-arrays"],
)
def test_a_body_of_more_values_than_the_limit_is_refused_naming_where(
    body: bytes, field: str
) -> None:
    with pytest.raises(errors.ReachstoreError) as refused:
        http_body.parse_json_object(body)
    failure = refused.value.failure
    assert failure.error_code == "PAYLOAD_TOO_LARGE", failure
    data = dict(failure.structured_data)
    assert data == {"limit_values": LIMIT, "field": field}, data


def test_a_body_of_exactly_the_limit_is_accepted() -> None:
    # The top object, its one array, and the array's items.
    body = b'{"namespaces": [' + b",".join([b"1"] * (LIMIT - 2)) + b"]}"
    assert len(http_body.parse_json_object(body)["namespaces"]) == LIMIT - 2


def _refused_before_parsing(body: bytes) -> bool:
    return http_body._too_many_values_by_punctuation(body, LIMIT)


def test_punctuation_refuses_arrays_the_parser_would_build_first() -> None:
    nested = b"[" * 500 + b"]" * 500
    assert _refused_before_parsing(b'{"a": [' + b",".join([nested] * 500) + b"]}")
    assert _refused_before_parsing(b'{"a": [' + b",".join([b"0"] * (LIMIT + 1)) + b"]}")
    # Keys with empty arrays: half the strings are keys, every key has a value.
    wide = b",".join(b'"k%d": []' % n for n in range(LIMIT))
    assert _refused_before_parsing(b"{" + wide + b"}")


def test_punctuation_inside_strings_is_not_counted() -> None:
    text = b'a, b, [c], {d}, \\"e, f\\", \\\\' * (LIMIT // 2)
    body = b'{"text": "' + text + b'", "metadata": {"k": "v,[{"}}'
    assert not _refused_before_parsing(body)
    assert http_body.parse_json_object(body)["metadata"] == {"k": "v,[{"}


def test_punctuation_lets_a_body_of_exactly_the_limit_through() -> None:
    body = b'{"namespaces": [' + b",".join([b"1"] * (LIMIT - 2)) + b"]}"
    assert not _refused_before_parsing(body)
