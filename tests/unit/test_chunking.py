"""Splitting documents into overlapping chunks."""

from __future__ import annotations

import pytest

from reachstore_server.ingest.domain.chunking import chunk_text


def test_a_short_text_is_one_chunk() -> None:
    assert chunk_text("  A short note.  ") == ["A short note."]


def test_blank_text_gives_no_chunks() -> None:
    assert chunk_text("   ") == []


def test_long_english_text_splits_at_sentences_with_overlap() -> None:
    sentences = [f"Sentence number {i} talks about topic {i}." for i in range(60)]
    chunks = chunk_text(" ".join(sentences), max_chars=300, overlap=80)
    assert len(chunks) > 1
    assert all(len(c) <= 300 for c in chunks)
    for sentence in sentences:  # nothing is lost
        assert any(sentence in c for c in chunks)
    for previous, current in zip(
        chunks, chunks[1:], strict=False
    ):  # each chunk repeats the last sentence
        assert previous.rsplit(". ", 1)[-1].rstrip(".") in current


def test_chinese_text_splits_at_chinese_punctuation() -> None:
    text = "语义存储把持久的上下文放在离智能体更近的地方。" * 40
    chunks = chunk_text(text, max_chars=200, overlap=40)
    assert len(chunks) > 1
    assert all(len(c) <= 200 for c in chunks)
    assert all(c.endswith("。") for c in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_into_windows() -> None:
    word_soup = " ".join(f"w{i}" for i in range(1000))
    chunks = chunk_text(word_soup, max_chars=200, overlap=40)
    assert all(len(c) <= 200 for c in chunks)
    assert chunks[0].startswith("w0 ") and chunks[-1].endswith("w999")


def test_overlap_must_be_smaller_than_the_chunk() -> None:
    with pytest.raises(ValueError):
        chunk_text("x" * 1000, max_chars=100, overlap=100)
