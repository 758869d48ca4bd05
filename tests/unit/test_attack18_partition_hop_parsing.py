"""The hop headers as a caller can send them (membership.py, router.py, partitions.py): a
hop header that does not verify -- forged, altered, garbage -- is ignored and the call is
handled as any other (docs/SHARDS.md), so ``verify`` answers False for any string a caller
can send and never raises, and what members sign cannot be swapped under the signature."""

from __future__ import annotations

import pytest

from reachstore.query.v1 import query_service_pb2 as pb
from reachstore_server.query.shards.membership import HOP_HEADER
from reachstore_server.query.shards.partitions import PARTS_HEADER, decode_parts, parse_label
from reachstore_server.query.shards.router import (
    LEXICAL_STATS_HEADER,
    STAGE_HEADER,
    Router,
    _signed_body,
    decode_stats,
)
from tests.unit.test_shard_hops import _member, _Table


@pytest.mark.parametrize(
    "header",
    [
        # All ASCII, well under gRPC's 8 KiB header limit: any caller can send these.
        "a." + "9" * 5000 + "." + "0" * 64,
        "a." + "1" * 4301 + ".x",
    ],
)
def test_a_hop_stamp_of_many_digits_does_not_verify_and_does_not_raise(header: str) -> None:
    """``int()`` refuses strings of more than 4,300 digits: read before authentication (the
    gRPC guard asks whether a call is forwarded), such a stamp made any caller's Query
    end INTERNAL with a logged traceback."""
    table = _Table()
    b = _member(table, "b")
    assert b.verify(header, b"request") is False


def test_router_is_forwarded_with_a_huge_stamp_is_false_not_an_exception() -> None:
    table = _Table()
    router = Router(_member(table, "b"), tls=None)  # type: ignore[arg-type]
    request = pb.QueryRequest(namespaces=["atlas"], query="x")
    metadata = [(HOP_HEADER, "a." + "9" * 5000 + ".0")]
    assert router.is_forwarded(request, metadata) is False


def test_a_signed_hop_replayed_with_other_partition_headers_does_not_verify() -> None:
    """Held: the parts / stage / stats headers are covered by the signature."""
    table = _Table()
    a, b = _member(table, "a"), _member(table, "b")
    router = Router(b, tls=None)  # type: ignore[arg-type]
    request = pb.QueryRequest(namespaces=["atlas"], query="amber", allow_partial=True)
    signed_with = {PARTS_HEADER: "atlas=0/4"}
    hop = a.sign(_signed_body(request, signed_with))
    assert router.is_forwarded(request, [(HOP_HEADER, hop), (PARTS_HEADER, "atlas=0/4")])
    for extra in (
        [(PARTS_HEADER, "atlas=1/4")],
        [],  # the header dropped: searched whole
        [(PARTS_HEADER, "atlas=0/4"), (STAGE_HEADER, "term-stats")],
        [(PARTS_HEADER, "atlas=0/4"), (LEXICAL_STATS_HEADER, '{"atlas":[1,1,{"amber":1}]}')],
    ):
        assert not router.is_forwarded(request, [(HOP_HEADER, hop), *extra]), extra
    # Another request under the same signature.
    other = pb.QueryRequest(namespaces=["atlas"], query="basalt", allow_partial=True)
    assert not router.is_forwarded(other, [(HOP_HEADER, hop), (PARTS_HEADER, "atlas=0/4")])


def test_a_duplicated_parts_header_is_read_the_same_way_by_the_check_and_the_search() -> None:
    """Held: the signature and the search both read the first value of a repeated key."""
    table = _Table()
    a, b = _member(table, "a"), _member(table, "b")
    router = Router(b, tls=None)  # type: ignore[arg-type]
    request = pb.QueryRequest(namespaces=["atlas"], query="amber", allow_partial=True)
    hop = a.sign(_signed_body(request, {PARTS_HEADER: "atlas=0/4"}))
    metadata = [(HOP_HEADER, hop), (PARTS_HEADER, "atlas=0/4"), (PARTS_HEADER, "atlas=1/4")]
    assert router.is_forwarded(request, metadata)
    assert router.parts_asked(metadata) == decode_parts("atlas=0/4")


@pytest.mark.parametrize(
    "label", ["", "/", "0/", "/4", "4/4", "0/3", "0/128", "-1/4", "0/0", "1/1", "0x1/4", "²/4"]
)
def test_partition_labels_that_are_not_partitions_are_refused_not_raised(label: str) -> None:
    """``parse_label`` returns None for anything that is not a partition ("²/4": digits
    of other scripts pass ``str.isdigit()`` and then fail ``int()``)."""
    assert parse_label(label) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not json",
        "[]",
        '{"atlas": [1, 2]}',
        '{"atlas": [1, 2, []]}',
        '{"atlas": ["1", 2, {}]}',
        '{"atlas": [1, 2, {"t": "x"}]}',
        '{"atlas": [1, 2, {"t": 1.5}]}',
        "9" * 5000,
        '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
)
def test_garbage_lexical_stats_decode_to_nothing(value: str) -> None:
    """``decode_stats`` returns {} for anything malformed; a very long number or deep
    nesting make ``json.loads`` raise ValueError or RecursionError."""
    assert decode_stats(value) == {}
