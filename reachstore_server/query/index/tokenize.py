"""Tokenizer for BM25 that needs no dictionary and works across scripts.

Rules, applied after NFKC normalisation and Unicode case folding:

* Alphabetic scripts (Latin, Cyrillic, Greek, Arabic, Devanagari, ...): a token is a
  maximal run of letters, digits and combining marks. Everything else (punctuation,
  symbols, whitespace, the underscore) separates tokens, so ``os.path_join`` gives
  ``os``, ``path``, ``join`` and ``3.11`` gives ``3``, ``11``.
* CJK scripts (Han, Hiragana, Katakana, Hangul): a maximal run is turned into
  overlapping character bigrams (``信息检索`` -> ``信息``, ``息检``, ``检索``); a run of a
  single character gives that character as a unigram.

Why bigrams for CJK: these scripts are written without spaces, so "words" can only be
found with a segmentation dictionary or model (jieba, MeCab, ...), which would be a
download, a per-language choice and a source of segmentation errors. Overlapping
bigrams need no dictionary, never mis-segment (every possible two-character word is
present), work the same for Chinese, Japanese and Korean, and are the standard
dictionary-free practice in search engines (Lucene's ``CJKBigramFilter`` /
``CJKAnalyzer``, Elasticsearch's ``cjk`` analyzer). Most Chinese words are one or two
characters, so bigrams match them well; longer words match as runs of bigrams, which
BM25 rewards naturally.

NFKC folds full-width Latin letters and digits (``ＡＢＣ１２３``) and half-width katakana
to their ordinary forms and composes accents, so equivalent spellings get the same
token. ``str.casefold`` is the Unicode-aware lower-casing (``Straße`` -> ``strasse``).
Accents are kept (``résumé`` stays distinct from ``resume``) - in French and German
they carry meaning, and the dense retriever covers spelling variation anyway.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator

__all__ = ["tokenize"]

# Han (CJK Unified Ideographs + extension A + compatibility + extensions B..),
# Hiragana, Katakana (+ phonetic extensions), Bopomofo, Hangul syllables and jamo.
_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3100-\u312f"  # Bopomofo
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31a0-\u31bf"  # Bopomofo extended
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul jamo extended A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul jamo extended B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B..G
)


def _mark_ranges() -> str:
    """Character-class body for all combining marks (categories Mn, Mc, Me).

    Python's ``\\w`` does not include combining marks, which would split words in
    scripts such as Devanagari or Thai at every vowel sign.
    """
    parts: list[str] = []
    start = prev = -1
    for cp in range(0x20000):  # all marks outside the variation-selector block are below
        if unicodedata.category(chr(cp)).startswith("M"):
            if start < 0:
                start = cp
            prev = cp
        elif start >= 0:
            parts.append(_range(start, prev))
            start = -1
    if start >= 0:
        parts.append(_range(start, prev))
    parts.append(_range(0xE0100, 0xE01EF))  # variation selectors supplement
    return "".join(parts)


def _range(a: int, b: int) -> str:
    return re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"


@functools.cache
def _pattern() -> re.Pattern[str]:
    # Group 1: a CJK run. Group 2: a word = a letter/digit that is not CJK, followed by
    # letters, digits or combining marks that are not CJK.
    word_start = rf"[^\W_{_CJK_RANGES}]"
    word_cont = rf"(?:[^\W_{_CJK_RANGES}]|[{_mark_ranges()}])"
    return re.compile(rf"([{_CJK_RANGES}]+)|({word_start}{word_cont}*)")


def normalize(text: str) -> str:
    """NFKC + case folding (what every token goes through)."""
    return unicodedata.normalize("NFKC", text).casefold()


def iter_tokens(text: str) -> Iterator[str]:
    for m in _pattern().finditer(normalize(text)):
        cjk = m.group(1)
        if cjk is None:
            yield m.group(2)
        elif len(cjk) == 1:
            yield cjk
        else:
            for i in range(len(cjk) - 1):
                yield cjk[i : i + 2]


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` for BM25, in order, repeats kept."""
    return list(iter_tokens(text))
