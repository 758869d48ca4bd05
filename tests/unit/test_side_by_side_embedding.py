"""The query service's one-question embedding (``reachstore_server/embedding/side_by_side.py``)
gives the model package's own vectors, split over two threads or not, for the texts the
service may meet: the README's lines (English, Chinese, code, tables) and odd inputs."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.embedding.side_by_side import SideBySide

README = Path(__file__).resolve().parents[2] / "README.md"
ODD = [
    "x",
    "语义存储把什么放在离 Agent 更近的地方？",
    "   spaces   around   ",
    "ＡＢＣ１２３ full-width",
    "emoji 🙂 and combining é",
    "a " * 400,
    "\u200b",
    # At the query length limit (4,096 characters): thousands of tokens.
    ("emoji 🙂 e\u0301 𠀀 한국어 \u200b the " * 200)[:4096],
    ("the " * 1024)[:4096],
]


@pytest.fixture(scope="module")
def embedders() -> tuple[UsemEmbedder, UsemEmbedder]:
    return UsemEmbedder(threads=1), UsemEmbedder(threads=1, side_by_side=True)


def _texts() -> list[str]:
    lines = [line.strip() for line in README.read_text(encoding="utf-8").splitlines()]
    return [line[:300] for line in lines if line][:120] + ODD


def test_a_lone_question_gets_the_packages_vector_split_or_not(
    embedders: tuple[UsemEmbedder, UsemEmbedder],
) -> None:
    package, side = embedders
    texts = _texts()
    expected = package.embed(texts)
    assert side._side is not None
    split = np.stack([side._side.embed(t, split=True) for t in texts])
    whole = np.stack([side._side.embed(t, split=False) for t in texts])
    for got in (split, whole):
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=2e-6)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_the_embedder_interface_returns_one_row_for_one_text(
    embedders: tuple[UsemEmbedder, UsemEmbedder],
) -> None:
    package, side = embedders
    got = side.embed(["Refunds reach the card within five working days."])
    assert got.shape == (1, 512) and got.flags.c_contiguous
    np.testing.assert_allclose(
        got, package.embed(["Refunds reach the card within five working days."]), atol=2e-6
    )
    # Several texts still go through the package's batched path.
    np.testing.assert_allclose(side.embed(ODD), package.embed(ODD), atol=2e-6)


def test_concurrent_questions_each_get_their_own_vector(
    embedders: tuple[UsemEmbedder, UsemEmbedder],
) -> None:
    package, side = embedders
    texts = _texts()[:64]
    expected = package.embed(texts)
    got: dict[int, np.ndarray] = {}

    def worker(offset: int) -> None:
        for i in range(offset, len(texts), 4):
            got[i] = side.embed([texts[i]])[0]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(len(texts)))
    np.testing.assert_allclose(np.stack([got[i] for i in range(len(texts))]), expected, atol=2e-6)


def test_a_small_first_stage_table_refills_and_long_texts_bypass_it(
    embedders: tuple[UsemEmbedder, UsemEmbedder],
) -> None:
    package, side = embedders
    model = side._model
    small = SideBySide(model._model, model._tokenizer, first_stage_tokens=24)
    texts = _texts()[:40]  # many with more than 24 distinct tokens, all past 24 together
    expected = package.embed(texts)
    for _ in range(2):  # the second round finds rows kept by the first, then refills
        got = np.stack([small.embed(t, split=False) for t in texts])
        np.testing.assert_allclose(got, expected, atol=2e-6)
    assert 0 < len(small._row_of) <= 24
    small.close()
