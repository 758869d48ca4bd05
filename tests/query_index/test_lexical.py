import math

import pytest

from reachstore_server.query.index import CancelToken, LexicalIndex, SearchCancelled

DOCS = {
    1: "the quick brown fox jumps over the lazy dog",
    2: "the lazy cat sleeps all day",
    3: "a quick guide to configuring nftables firewalls",
    4: "大熊猫以竹子为主要食物",
    5: "the dog and the cat are friends",
}


def build(docs=DOCS) -> LexicalIndex:
    idx = LexicalIndex()
    for cid, text in docs.items():
        idx.add(cid, text)
    return idx


def test_rare_term_finds_its_only_document():
    res = build().search("nftables", 5)
    assert [cid for cid, _ in res] == [3]
    assert res[0][1] > 0


def test_scores_follow_bm25_with_k1_1_2_and_b_0_75():
    idx = build()
    n = len(DOCS)
    lengths = {cid: len(text.split()) for cid, text in DOCS.items() if cid != 4}
    lengths[4] = 10  # ten overlapping bigrams of an eleven-character run
    avgdl = sum(lengths.values()) / n
    df = 2  # "lazy" is in documents 1 and 2
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def expected(cid: int) -> float:
        tf = 1
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * lengths[cid] / avgdl))

    got = dict(idx.search("lazy", 10))
    assert set(got) == {1, 2}
    assert got[1] == pytest.approx(expected(1))
    assert got[2] == pytest.approx(expected(2))
    assert got[2] > got[1]  # same tf, shorter document


def test_results_are_sorted_by_score_and_cut_to_k():
    res = build().search("the lazy dog cat", 2)
    assert len(res) == 2
    assert res[0][1] >= res[1][1]


def test_chinese_query_matches_through_bigrams():
    assert [cid for cid, _ in build().search("熊猫吃什么", 3)] == [4]


def test_removed_document_is_not_returned_and_statistics_update():
    idx = build()
    assert idx.remove(3) is True
    assert idx.remove(3) is False
    assert idx.search("nftables", 5) == []
    assert len(idx) == 4


def test_adding_an_existing_id_replaces_its_text():
    idx = build()
    idx.add(3, "completely different words")
    assert idx.search("nftables", 5) == []
    assert [cid for cid, _ in idx.search("different", 5)] == [3]
    assert len(idx) == len(DOCS)


def test_allowed_ids_restrict_candidates_without_changing_scores():
    idx = build()
    full = dict(idx.search("lazy dog", 10))
    only = idx.search("lazy dog", 10, allowed_ids={2, 3})
    assert [cid for cid, _ in only] == [2]
    assert only[0][1] == pytest.approx(full[2])
    assert idx.search("lazy dog", 10, allowed_ids=set()) == []
    assert idx.search("lazy dog", 10, allowed_ids={999}) == []


def test_query_without_known_terms_returns_nothing():
    idx = build()
    assert idx.search("zzzz", 5) == []
    assert idx.search("", 5) == []
    assert LexicalIndex().search("fox", 5) == []


def test_compaction_after_many_removals_keeps_results_identical_to_a_fresh_index():
    idx = LexicalIndex()
    texts = {i: f"common word{i % 97} token{i % 13} filler{i}" for i in range(3000)}
    for cid, text in texts.items():
        idx.add(cid, text)
    for cid in range(0, 2500):
        idx.remove(cid)  # crosses the compaction trigger (dead > live, dead >= 1024)
    survivors = {cid: t for cid, t in texts.items() if cid >= 2500}
    fresh = LexicalIndex()
    for cid, text in survivors.items():
        fresh.add(cid, text)
    assert idx._nslots < len(texts)  # a compaction ran and renumbered the slots
    for q in ("word5 token3", "common", "filler2999 word1"):
        got = idx.search(q, 20)
        want = fresh.search(q, 20)
        assert [c for c, _ in got] == [c for c, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])


def test_cancelled_token_stops_the_search():
    token = CancelToken()
    token.cancel()
    with pytest.raises(SearchCancelled) as info:
        build().search("lazy", 5, cancel=token)
    assert info.value.reason == "cancelled"


def test_long_posting_list_checks_the_token_between_blocks():
    idx = LexicalIndex()
    for cid in range(20000):
        idx.add(cid, "same words everywhere")

    class CancelAfter(CancelToken):
        __slots__ = ("calls",)

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def check(self) -> None:
            self.calls += 1
            if self.calls == 3:  # entry, first term, then inside the first posting list
                self.cancel()
            super().check()

    token = CancelAfter()
    with pytest.raises(SearchCancelled):
        idx.search("same", 5, cancel=token)
    assert token.calls == 3


def test_filtered_search_equals_filtering_the_full_ranking_even_against_the_score_order():
    idx = LexicalIndex()
    for cid in range(3000):
        idx.add(cid, "needle " * (1 + cid % 7) + f"hay{cid % 11} filler{cid}")
    full = idx.search("needle hay3", 3000)
    assert len(full) == 3000
    worst = {cid for cid, _ in full[-300:]}  # the filter allows only the lowest-scored
    every_third = {cid for cid, _ in full[::3]}
    for allowed in (worst, every_third, {full[-1][0]}):
        want = [hit for hit in full if hit[0] in allowed][:50]
        got = idx.search("needle hay3", 50, allowed_ids=allowed)
        assert [c for c, _ in got] == [c for c, _ in want]
        assert [sc for _, sc in got] == pytest.approx([sc for _, sc in want])
