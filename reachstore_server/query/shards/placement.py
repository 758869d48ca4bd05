"""Where a namespace lives: rendezvous (highest-random-weight) hashing over the members.

Every member scores every (member, namespace) pair with the same hash and the R members
with the highest scores own the namespace. Any process that sees the same member list
computes the same owners without talking to anyone, and when a member joins or leaves only
the namespaces it wins or held move (about 1/N of them), unlike ``hash % N``, which moves
nearly all. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def shard_key(tenant: str, namespace: str) -> str:
    """What a namespace is placed by: names are unique per tenant only. The NUL cannot
    occur in either (names.py), so two different pairs never give one key."""
    return f"{tenant}\x00{namespace}"


def _score(member_id: str, key: str) -> int:
    digest = hashlib.blake2b(f"{member_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owners(key: str, members: Iterable[str], replicas: int) -> list[str]:
    """The ``replicas`` members that own ``key``, best first (ties, which need equal 64-bit
    digests, fall to the smaller member id so every process agrees)."""
    ranked = sorted(members, key=lambda m: (-_score(m, key), m))
    return ranked[: max(replicas, 1)]


def replicas_for(members: Sequence[str], configured: int) -> int:
    """R: the configured replication factor, but never more than the members there are."""
    return max(1, min(configured, len(members)))
