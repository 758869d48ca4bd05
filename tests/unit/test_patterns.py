"""Whether one grant pattern stays inside another (what a key may hand on)."""

from __future__ import annotations

import fnmatch
import itertools
import random

import pytest

from reachstore_server.common.patterns import covered, covers


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ("docs-*", "docs-a"),
        ("docs-*", "docs-*"),
        ("docs-*", "docs-a*"),
        ("docs-*", "docs-?"),
        ("docs-*", "docs-*-x"),
        ("*", "anything-*"),
        ("d?cs", "docs"),
        ("d?cs", "d?cs"),
        ("*-a", "x*-a"),
        ("a*b*c", "a-b*-c"),
    ],
)
def test_inside(outer: str, inner: str) -> None:
    assert covers(outer, inner)


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ("docs-*", "*"),
        ("docs-*", "doc*"),
        ("docs-*", "private"),
        ("docs-?", "docs-*"),
        ("docs-?", "docs-ab"),
        ("docs", "doc?"),
        ("d?cs", "d*cs"),
        ("*-a", "*"),
    ],
)
def test_outside(outer: str, inner: str) -> None:
    assert not covers(outer, inner)


def test_an_empty_list_covers_everything_and_a_list_covers_what_one_of_it_does() -> None:
    assert covered("*", [])
    assert covered("team-b-1", ["team-a-*", "team-b-*"])
    assert not covered("team-c-1", ["team-a-*", "team-b-*"])


def test_a_yes_is_never_wrong() -> None:
    """Soundness, checked by brute force: whenever ``covers`` says yes, every name the
    inner pattern matches (over a small alphabet, up to 5 characters) the outer matches."""
    rng = random.Random(14)
    alphabet = "ab-"
    names = ["".join(p) for n in range(6) for p in itertools.product(alphabet, repeat=n)]
    symbols = "ab-*?"
    for _ in range(3000):
        outer = "".join(rng.choice(symbols) for _ in range(rng.randint(0, 4)))
        inner = "".join(rng.choice(symbols) for _ in range(rng.randint(0, 4)))
        if covers(outer, inner):
            for name in names:
                if fnmatch.fnmatchcase(name, inner):
                    assert fnmatch.fnmatchcase(name, outer), (outer, inner, name)
