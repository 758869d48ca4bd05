"""Partitions of a large namespace: which documents each holds, and how they are named.

A namespace is placed whole on its R owners until one of them finds it holds more chunks
than ``REACHSTORE_QUERY_PARTITION_CHUNKS``; then it is split into partitions, each placed
on R members of its own (docs/SHARDS.md, "Partitions"). A document belongs to partition
``hash(document id) mod count``, and counts are powers of two, so doubling the count splits
every partition in two and never mixes documents of two old partitions.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from reachstore_server.query.shards.placement import shard_key

# A namespace is split at most this far: 64 partitions of the default size is 12.8 million
# chunks, past which one namespace wants an engine of its own, not more partitions.
MAX_PARTITIONS = 64


@dataclasses.dataclass(frozen=True, order=True)
class Part:
    """Partition ``index`` of ``count``; ``WHOLE`` is the namespace unsplit."""

    index: int
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = Part(0, 1)
_DIGITS = re.compile(r"[0-9]+")


def partition_of(document_id: str, count: int) -> int:
    """The partition a document belongs to when its namespace has ``count`` of them."""
    if count <= 1:
        return 0
    digest = hashlib.blake2b(document_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parts(count: int) -> list[Part]:
    """Every partition of a namespace split ``count`` ways (``[WHOLE]`` unsplit)."""
    return [Part(i, count) for i in range(max(count, 1))]


def unit_key(tenant: str, namespace: str, part: Part) -> str:
    """What a partition is placed by. A whole namespace keeps its own key, so placement
    and the members' published loading lists are unchanged for namespaces never split."""
    base = shard_key(tenant, namespace)
    return base if part.count <= 1 else f"{base}\x00{part.label}"


def count_for(chunks: int, count: int, limit: int) -> int:
    """The partition count a namespace needs when one of its ``count`` partitions holds
    ``chunks``: doubled until a partition of that size is within ``limit``, never lower
    than it is (a split is not undone) and at most ``MAX_PARTITIONS``."""
    count = max(count, 1)
    while chunks > limit and count < MAX_PARTITIONS:
        count *= 2
        chunks = (chunks + 1) // 2
    return count


def parse_label(label: str) -> Part | None:
    """``"3/8"`` -> ``Part(3, 8)``; None for anything that is not a partition of a power of
    two within ``MAX_PARTITIONS``."""
    index, sep, count = label.partition("/")
    if not sep or len(label) > 8 or not _DIGITS.fullmatch(index) or not _DIGITS.fullmatch(count):
        return None
    part = Part(int(index), int(count))
    powers = {1 << i for i in range(MAX_PARTITIONS.bit_length())}
    if part.count not in powers or part.count > MAX_PARTITIONS or part.index >= part.count:
        return None
    return part


# The partitions a forwarded search asks for travel in their own header, signed with the
# request (membership.py): "name=3/8,other=0/2". A namespace not named is searched whole.
PARTS_HEADER = "x-reachstore-parts"


def encode_parts(wanted: dict[str, Part]) -> str:
    return ",".join(f"{name}={part.label}" for name, part in sorted(wanted.items()))


def decode_parts(header: str) -> dict[str, Part]:
    """The header's partitions by namespace; entries that do not parse are left out (the
    header is signed: only a member wrote it)."""
    out: dict[str, Part] = {}
    for entry in header.split(",") if header else ():
        name, sep, label = entry.partition("=")
        part = parse_label(label) if sep else None
        if part is not None:
            out[name] = part
    return out


def label_of(namespace: str, part: Part) -> str:
    """How one query names the search of a partition among its others: the namespace's
    name for a whole namespace, ``"name#3/8"`` for a partition ('#' is never in a name)."""
    return namespace if part.count <= 1 else f"{namespace}#{part.label}"


def split_label(label: str) -> tuple[str, Part]:
    name, sep, rest = label.partition("#")
    return name, (parse_label(rest) or WHOLE) if sep else WHOLE
