from reachstore_server.query.index import Hit, merge_hits


def hit(cid: int, score: float, content_hash: str | None = None) -> Hit:
    return Hit(
        cid,
        f"doc{cid}",
        0,
        f"text {cid}",
        {},
        content_hash if content_hash is not None else f"h{cid}",
        score,
    )


def test_hits_are_ordered_globally_by_score():
    merged = merge_hits({"a": [hit(1, 0.03), hit(2, 0.01)], "b": [hit(3, 0.02)]}, 10)
    assert [(ns, h.chunk_id) for ns, h in merged] == [("a", 1), ("b", 3), ("a", 2)]


def test_equal_scores_keep_namespace_order_then_rank():
    merged = merge_hits({"b": [hit(1, 0.02), hit(2, 0.02)], "a": [hit(3, 0.02), hit(4, 0.03)]}, 10)
    assert [h.chunk_id for _, h in merged] == [4, 1, 2, 3]


def test_same_content_in_two_namespaces_is_returned_once_from_the_better_place():
    merged = merge_hits(
        {"a": [hit(1, 0.01, "same")], "b": [hit(2, 0.03, "same"), hit(3, 0.02)]}, 10
    )
    assert [(ns, h.chunk_id) for ns, h in merged] == [("b", 2), ("b", 3)]


def test_empty_hashes_are_never_duplicates():
    merged = merge_hits({"a": [hit(1, 0.02, "")], "b": [hit(2, 0.01, "")]}, 10)
    assert [h.chunk_id for _, h in merged] == [1, 2]


def test_result_is_cut_to_top_k():
    per = {
        "a": [hit(i, 1.0 / (60 + i)) for i in range(1, 20)],
        "b": [hit(100 + i, 1.0 / (60 + i)) for i in range(1, 20)],
    }
    merged = merge_hits(per, 5)
    assert [h.chunk_id for _, h in merged] == [1, 101, 2, 102, 3]
    assert merge_hits(per, 0) == []
    assert merge_hits({}, 5) == []
