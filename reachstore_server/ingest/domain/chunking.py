"""Splitting a document into overlapping chunks of about one paragraph.

Chunks end at sentence boundaries where possible (Latin and CJK punctuation, line breaks)
because the embedder encodes sentence-length text best; each chunk repeats the last
sentences of the previous one, up to ``overlap`` characters, so an answer that straddles a
boundary is still found whole in one chunk.
"""

from __future__ import annotations

import re

MAX_CHARS = 800
OVERLAP_CHARS = 120

# A sentence ends after terminal punctuation followed by space, or after CJK terminal
# punctuation (CJK text has no spaces), or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")


def _sentences(text: str) -> list[str]:
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text)) if s]


def _hard_split(sentence: str, max_chars: int, overlap: int) -> list[str]:
    """A sentence longer than a chunk: fixed windows, cut at a space when one is near."""
    pieces, start = [], 0
    while start < len(sentence):
        end = min(start + max_chars, len(sentence))
        if end < len(sentence):
            space = sentence.rfind(" ", start + max_chars // 2, end)
            end = space if space > 0 else end
        pieces.append(sentence[start:end].strip())
        if end >= len(sentence):
            break
        start = max(end - overlap, start + 1)
    return [p for p in pieces if p]


def chunk_text(text: str, max_chars: int = MAX_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """Chunks of at most ``max_chars`` characters covering all of ``text``, in order."""
    if overlap >= max_chars:
        raise ValueError("overlap must be smaller than max_chars")
    text = text.strip()
    if len(text) <= max_chars:
        return [text] if text else []
    units: list[str] = []
    for sentence in _sentences(text):
        units.extend(
            _hard_split(sentence, max_chars, overlap) if len(sentence) > max_chars else [sentence]
        )

    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for unit in units:
        if current and size + 1 + len(unit) > max_chars:
            chunks.append(" ".join(current))
            # Carry trailing sentences into the next chunk, within the overlap budget and
            # leaving room for the unit that did not fit.
            carried: list[str] = []
            carried_size = 0
            for previous in reversed(current):
                if carried_size + len(previous) + 1 > min(overlap, max_chars - len(unit) - 1):
                    break
                carried.insert(0, previous)
                carried_size += len(previous) + 1
            current, size = carried, carried_size
        current.append(unit)
        size += len(unit) + (1 if size else 0)
    if current:
        chunks.append(" ".join(current))
    return chunks
