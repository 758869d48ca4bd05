"""Checking one tenant's chain: every event against its hash and its link to the one
before, then the chain against its signed checkpoints. Pure logic over rows the caller
reads in chain order, so it runs the same in the audit service and on the command line.

What each break looks like:

- edited: an event's content no longer hashes to its stored hash;
- deleted: an event links to a hash that no event has (or a position is skipped);
- inserted: an event links to an event further back, so the ones between are new;
- reordered: an event links to an event that exists, but later in the chain;
- truncated: a checkpoint names a position beyond the chain's end;
- forged checkpoint: a checkpoint's signature does not verify;
- rewritten: the chain is consistent in itself but differs from a checkpoint at its
  position (someone recomputed every hash after a change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from services.audit.chain import GENESIS, HASHED_FIELDS, Signer, event_hash

EDITED = "edited"
DELETED = "deleted"
INSERTED = "inserted"
REORDERED = "reordered"
TRUNCATED = "truncated"
FORGED_CHECKPOINT = "forged_checkpoint"
REWRITTEN = "rewritten"


@dataclasses.dataclass(frozen=True)
class Break:
    kind: str
    tenant: str
    seq: int
    event_id: str
    detail: str


@dataclasses.dataclass(frozen=True)
class CheckpointRecord:
    tenant: str
    seq: int
    head_hash: str
    signed_at: str
    signature: str


@dataclasses.dataclass
class Report:
    events_checked: int = 0
    checkpoints_checked: int = 0
    first_break: Break | None = None


def verify_chain(
    tenant: str,
    events: Iterable[Any],
    checkpoints: Sequence[CheckpointRecord],
    signer: Signer,
    seq_of_hash: Callable[[str], int | None],
    start_after: tuple[int, str] = (0, GENESIS),
    to_seq: int | None = None,
) -> Report:
    """Walks ``events`` (rows with the hashed fields, ``seq`` and ``hash``, in seq order,
    starting right after ``start_after`` = (seq, hash)) and the ``checkpoints`` that fall
    in the checked range; returns the first break by position, if any."""
    report = Report()
    breaks: list[Break] = []
    prev_seq, prev_hash = start_after
    before_prev: str | None = None
    hash_at: dict[int, str] = {}
    wanted = {c.seq for c in checkpoints}
    for row in events:
        report.events_checked += 1
        found = _check_event(tenant, row, prev_seq, prev_hash, before_prev, seq_of_hash)
        if found is not None:
            breaks.append(found)
            break
        if row.seq in wanted:
            hash_at[row.seq] = row.hash
        before_prev, prev_seq, prev_hash = prev_hash, row.seq, row.hash
    chain_end = prev_seq if not breaks else None
    for checkpoint in checkpoints:
        if to_seq is not None and checkpoint.seq > to_seq:
            continue
        report.checkpoints_checked += 1
        found = _check_checkpoint(tenant, checkpoint, signer, hash_at, chain_end)
        if found is not None:
            breaks.append(found)
    if breaks:
        report.first_break = min(breaks, key=lambda b: b.seq)
    return report


def _check_event(
    tenant: str,
    row: Any,
    prev_seq: int,
    prev_hash: str,
    before_prev: str | None,
    seq_of_hash: Callable[[str], int | None],
) -> Break | None:
    fields = {name: getattr(row, name) for name in HASHED_FIELDS}
    if event_hash(fields) != row.hash:
        return Break(EDITED, tenant, row.seq, row.event_id, "its content does not match its hash")
    if row.seq != prev_seq + 1:
        return Break(
            DELETED,
            tenant,
            prev_seq + 1,
            "",
            f"position {prev_seq + 1} is missing: the chain jumps from {prev_seq} to {row.seq}",
        )
    if row.prev_hash == prev_hash:
        return None
    elsewhere = (
        prev_seq - 1
        if before_prev is not None and row.prev_hash == before_prev
        else seq_of_hash(row.prev_hash)
    )
    if elsewhere is not None and elsewhere < prev_seq:
        # It links back past the events just before it: those were added in between.
        return Break(
            INSERTED,
            tenant,
            elsewhere + 1,
            "",
            f"event {row.seq} links to event {elsewhere}: the event(s) at {elsewhere + 1} "
            f"to {prev_seq} were added",
        )
    if elsewhere is not None:
        return Break(
            REORDERED,
            tenant,
            row.seq,
            row.event_id,
            f"it links to the event now at position {elsewhere}, not to {prev_seq}",
        )
    return Break(
        DELETED,
        tenant,
        row.seq,
        row.event_id,
        "it links to an event that is no longer in the chain",
    )


def _check_checkpoint(
    tenant: str,
    checkpoint: CheckpointRecord,
    signer: Signer,
    hash_at: dict[int, str],
    chain_end: int | None,
) -> Break | None:
    c = checkpoint
    if not signer.verify(c.tenant, c.seq, c.head_hash, c.signed_at, c.signature):
        return Break(
            FORGED_CHECKPOINT,
            tenant,
            c.seq,
            "",
            f"the checkpoint at position {c.seq} (signed_at {c.signed_at}) has a bad signature",
        )
    if c.seq in hash_at:
        if hash_at[c.seq] != c.head_hash:
            return Break(
                REWRITTEN,
                tenant,
                c.seq,
                "",
                f"position {c.seq} differs from its signed checkpoint of {c.signed_at}",
            )
        return None
    if chain_end is not None and c.seq > chain_end:
        return Break(
            TRUNCATED,
            tenant,
            chain_end + 1,
            "",
            f"the chain ends at {chain_end}; a checkpoint of {c.signed_at} signed position {c.seq}",
        )
    return None
