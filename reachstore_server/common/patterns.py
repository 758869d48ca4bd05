"""Name patterns (`*` any run of characters, `?` one character), as namespace grants and
channel allow-lists hold them, and whether one pattern stays inside another.

``covers`` answers for key creation: may a key granted ``outer`` hand out ``inner``? It
is sound (True only when every name ``inner`` matches, ``outer`` matches too) but not
complete: it reads ``inner``'s wildcards as symbols that ``outer`` must absorb, so an
equivalent but differently written pattern (``?*`` under ``*?``) is refused. A refusal
costs the caller a more literal pattern; a wrong yes would widen a key.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence


def covers(outer: str, inner: str) -> bool:
    """Whether every name ``inner`` matches is also matched by ``outer``."""

    @functools.cache
    def rest(i: int, j: int) -> bool:
        # Does outer[i:] cover inner[j:]?
        if i == len(outer):
            return j == len(inner)
        if outer[i] == "*":
            # Absorbs nothing more, or one more symbol of inner (a literal, ?, or *).
            return rest(i + 1, j) or (j < len(inner) and rest(i, j + 1))
        if j == len(inner) or inner[j] == "*":
            return False  # only a * of outer can stand for a * of inner
        if outer[i] == "?":
            return rest(i + 1, j + 1)  # inner[j] is one character, literal or ?
        return outer[i] == inner[j] and rest(i + 1, j + 1)

    return rest(0, 0)


def covered(inner: str, outers: Sequence[str]) -> bool:
    """Whether ``inner`` stays inside a list of patterns (empty: everything)."""
    return not outers or any(covers(outer, inner) for outer in outers)
