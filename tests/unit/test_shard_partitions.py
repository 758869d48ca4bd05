"""Partitions of a large namespace (reachstore_server/query/shards/partitions.py,
partial.py) and the hop headers that ask for them (router.py): which documents a partition
holds, how far a namespace is split, how a namespace's answer is made of its partitions',
and that a caller cannot alter what a member signed."""

from __future__ import annotations

import collections

from google.protobuf import json_format

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.query.v1 import query_service_pb2 as pb
from reachstore_server.common import errors
from reachstore_server.query.index import Hit, TermStats
from reachstore_server.query.shards.partial import PartlyAnswered, combine
from reachstore_server.query.shards.partitions import (
    MAX_PARTITIONS,
    PARTS_HEADER,
    WHOLE,
    Part,
    count_for,
    decode_parts,
    encode_parts,
    label_of,
    parse_label,
    partition_of,
    split_label,
    unit_key,
)
from reachstore_server.query.shards.placement import shard_key
from reachstore_server.query.shards.router import (
    LEXICAL_STATS_HEADER,
    STAGE_HEADER,
    Router,
    _signed_body,
    decode_stats,
    encode_stats,
    shard_unavailable,
    signed_headers,
)
from tests.unit.test_shard_hops import _member, _Table

DOCUMENTS = [f"doc-{i}" for i in range(4000)]


def test_doubling_the_count_splits_each_partition_in_two() -> None:
    for count in (1, 2, 4, 8, 16):
        for doc in DOCUMENTS[:500]:
            assert partition_of(doc, 2 * count) % count == partition_of(doc, count)


def test_documents_spread_evenly() -> None:
    sizes = collections.Counter(partition_of(doc, 8) for doc in DOCUMENTS)
    assert set(sizes) == set(range(8))
    assert all(400 < n < 600 for n in sizes.values()), sizes


def test_a_namespace_is_split_until_its_partitions_fit_and_never_merged() -> None:
    assert count_for(100, 1, 200) == 1
    assert count_for(201, 1, 200) == 2
    assert count_for(1000, 1, 200) == 8  # 1000 -> 500 -> 250 -> 125
    assert count_for(150, 4, 200) == 4  # fits: stays, never fewer
    assert count_for(10**9, 1, 10) == MAX_PARTITIONS


def test_labels_and_headers_name_a_partition_exactly() -> None:
    assert label_of("orders", WHOLE) == "orders"
    assert split_label(label_of("orders", Part(3, 8))) == ("orders", Part(3, 8))
    assert split_label("orders") == ("orders", WHOLE)
    for bad in ("3/6", "8/8", "-1/4", "1/128", "a/b", "3", "3/4/5", "00000001/00000004"):
        assert parse_label(bad) is None, bad
    wanted = {"a": Part(1, 2), "b": Part(7, 8)}
    assert decode_parts(encode_parts(wanted)) == wanted
    assert decode_parts("a=1/2,b=9/8,c,=,d=0/1") == {"a": Part(1, 2), "d": WHOLE}
    # A whole namespace keeps the key it always had.
    assert unit_key("t", "n", WHOLE) == shard_key("t", "n")
    assert unit_key("t", "n", Part(0, 2)) != unit_key("t", "n", Part(0, 4))


def _hit(doc: str, score: float, dense: float | None = None) -> Hit:
    return Hit(-1, doc, 0, doc, {}, doc, score, dense, None)


def _failure(spec: errors.ErrorSpec, label: str) -> pf_pb2.PartialFailure:
    name, part = split_label(label)
    return (
        shard_unavailable(label, [], "down")
        if spec is errors.SHARD_UNAVAILABLE
        else (errors.make_failure(spec, structured_data={"namespace": name}, namespace=name))
    )


def test_a_missing_partition_is_a_partial_answer_naming_it() -> None:
    outcomes = {
        Part(0, 4): [_hit("a", 0.1, 0.9)],
        Part(1, 4): _failure(errors.SHARD_UNAVAILABLE, "ns#1/4"),
        Part(2, 4): [_hit("b", 0.1, 0.8)],
        Part(3, 4): _failure(errors.NAMESPACE_TIMEOUT, "ns#3/4"),
    }
    answer = combine(outcomes, 10)
    assert isinstance(answer, PartlyAnswered)
    assert [h.document_id for h in answer.hits] == ["a", "b"]
    assert answer.share == 0.5
    data = json_format.MessageToDict(answer.failure.structured_data)
    assert answer.failure.error_code == "SHARD_UNAVAILABLE"
    assert answer.failure.category == pf_pb2.CATEGORY_TRANSIENT
    assert (data["partitions"], data["partitions_missing"], data["partitions_answered"]) == (
        4,
        [1, 3],
        2,
    )
    assert data["partition"] == 1 and data["reason"] == "shard_unavailable"
    assert answer.failure.retryable
    assert answer.failure.retry_after_ms == max(2000, errors.NAMESPACE_TIMEOUT.retry_after_ms or 0)


def test_every_partition_missing_fails_the_namespace_and_a_refusal_refuses_it_whole() -> None:
    down = {Part(i, 2): _failure(errors.SHARD_UNAVAILABLE, f"ns#{i}/2") for i in range(2)}
    failed = combine(down, 10)
    assert isinstance(failed, pf_pb2.PartialFailure)
    assert json_format.MessageToDict(failed.structured_data)["partitions_missing"] == [0, 1]
    refused = {
        Part(0, 2): _failure(errors.NAMESPACE_RATE_LIMITED, "ns#0/2"),
        Part(1, 2): [_hit("a", 0.1, 0.9)],
    }
    answer = combine(refused, 10)
    assert isinstance(answer, pf_pb2.PartialFailure)
    assert answer.error_code == "NAMESPACE_RATE_LIMITED"
    # A permanent partition failure makes the partial answer not retryable.
    mixed = {
        Part(0, 2): _failure(errors.INTERNAL, "ns#0/2"),
        Part(1, 2): [_hit("a", 0.1, 0.9)],
    }
    partly = combine(mixed, 10)
    assert isinstance(partly, PartlyAnswered) and not partly.failure.retryable
    assert not partly.failure.HasField("retry_after_ms")


def test_statistics_travel_whole_and_garbage_is_dropped() -> None:
    stats = {"a": TermStats(10, 300, {"x": 3, "y": 1})}
    assert decode_stats(encode_stats(stats)) == stats
    for garbage in (
        "",
        "[]",
        "{",
        '{"a": [1, 2]}',
        '{"a": [1, "2", {}]}',
        '{"a": [1, 2, {"x": "3"}]}',
    ):
        assert decode_stats(garbage) == {}, garbage
    assert TermStats.total([TermStats(1, 5, {"x": 1}), TermStats(2, 7, {"x": 2, "y": 1})]) == (
        TermStats(3, 12, {"x": 3, "y": 1})
    )


def test_a_caller_cannot_alter_the_partitions_or_statistics_a_member_signed() -> None:
    table = _Table()
    a, b = _member(table, "a"), _member(table, "b")
    router = Router(b, tls=None)  # type: ignore[arg-type]
    request = pb.QueryRequest(namespaces=["ns"], query="q", allow_partial=True, timeout_ms=100)

    headers = {
        PARTS_HEADER: "ns=1/4",
        LEXICAL_STATS_HEADER: encode_stats({"ns": TermStats(1, 1, {})}),
    }
    signature = a.sign(_signed_body(request, headers))
    good = [("x-reachstore-hop", signature), *headers.items()]
    assert router.is_forwarded(request, good)
    assert signed_headers(good) == headers
    for key, value in (
        (PARTS_HEADER, "ns=2/4"),
        (LEXICAL_STATS_HEADER, encode_stats({"ns": TermStats(9, 9, {})})),
        (STAGE_HEADER, "term-stats"),
    ):
        altered = [(k, v) for k, v in good if k != key] + [(key, value)]
        assert not router.is_forwarded(request, altered), key
    dropped = [(k, v) for k, v in good if k != PARTS_HEADER]
    assert not router.is_forwarded(request, dropped)
