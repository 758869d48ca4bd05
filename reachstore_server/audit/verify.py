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
- rewritten: the chain is consistent in itself but differs from a checkpoint (or a
  witnessed head) at its position (someone recomputed every hash after a change);
- checkpoint_missing: a witness holds a signed head the database no longer has;
- witness_incomplete: the database holds a signed checkpoint a witness lacks (lines were
  removed from the witness's end, or it never got them);
- cadence_gap: events waited longer for a checkpoint than the checkpoint interval and its
  grace allow (checkpoints are missing for a period with events);
- unvouched_tail: a witness holds an ``unvouched`` head: events an audit process stored
  and stopped without signing, found by the next one at its start; whoever could write
  the database meanwhile could have changed them, so nothing vouches for them.

A witness's heads (``reachstore_server/audit/witness.py``) are checked like the database's own
checkpoints, and both sets against each other: deleting checkpoints, and the events they
vouch for, no longer leaves a consistent chain once a witness has a copy.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from reachstore_server.audit.chain import GENESIS, HASHED_FIELDS, values_hash
from reachstore_server.audit.signing import HMAC_PREFIX, CheckpointKeys
from reachstore_server.audit.witness import CHECKPOINT, UNVOUCHED, Head

# A row holds the HASHED_FIELDS in order, then seq and hash (``AuditStore.chain_rows``;
# anything after those is not looked at).
_FIELDS = len(HASHED_FIELDS)
_SEQ_AT, _HASH_AT = _FIELDS, _FIELDS + 1
_PREV_AT = HASHED_FIELDS.index("prev_hash")

EDITED = "edited"
DELETED = "deleted"
INSERTED = "inserted"
REORDERED = "reordered"
TRUNCATED = "truncated"
FORGED_CHECKPOINT = "forged_checkpoint"
REWRITTEN = "rewritten"
CHECKPOINT_MISSING = "checkpoint_missing"
WITNESS_INCOMPLETE = "witness_incomplete"
CADENCE_GAP = "cadence_gap"
UNVOUCHED_TAIL = "unvouched_tail"


@dataclasses.dataclass(frozen=True)
class Break:
    kind: str
    tenant: str
    seq: int
    event_id: str
    detail: str


CheckpointRecord = Head


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When checkpoints are due: every ``interval_s`` while events arrive, ``grace_s`` later
    at most (shipping delay, a slow tick). ``now`` is when the chain's unsigned tail is
    judged."""

    interval_s: float
    grace_s: float
    now: dt.datetime

    @property
    def allowed(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.interval_s + self.grace_s)


@dataclasses.dataclass(frozen=True)
class WitnessedHeads:
    """One witness's heads of the tenant being verified."""

    name: str
    heads: Sequence[Head]


@dataclasses.dataclass
class Report:
    events_checked: int = 0
    checkpoints_checked: int = 0
    first_break: Break | None = None
    # Processes that walked the events: more than one when the chain was long enough to
    # walk in parallel and every stretch passed.
    walkers: int = 1


@dataclasses.dataclass(frozen=True)
class Stops:
    """Positions whose hash (``wanted``: checkpoints and witnessed heads) or time
    (``opening``: the first event after each checkpoint) the checks after the walk need."""

    wanted: frozenset[int]
    opening: frozenset[int]


@dataclasses.dataclass
class Walk:
    """What a walk of a stretch of a chain found, when every event in it passed: each
    hashes to its stored hash, positions follow one another, each links to the one before.
    ``first_prev`` is the hash the stretch's first event links to, so stretches walked
    apart can be joined."""

    first_seq: int
    first_prev: str
    last_seq: int
    last_hash: str
    count: int
    hash_at: dict[int, str]
    openers: dict[int, str]
    walkers: int = 1

    def joins(self, before: tuple[int, str]) -> bool:
        """Whether this stretch starts right after ``before`` = (seq, hash)."""
        return self.count == 0 or (self.first_seq, self.first_prev) == (before[0] + 1, before[1])

    def then(self, later: Walk) -> Walk | None:
        """This stretch and ``later`` as one, or None when ``later`` does not follow it."""
        if later.count == 0:
            return self
        if self.count and not later.joins((self.last_seq, self.last_hash)):
            return None
        if self.count == 0:
            return later
        return Walk(
            self.first_seq,
            self.first_prev,
            later.last_seq,
            later.last_hash,
            self.count + later.count,
            {**self.hash_at, **later.hash_at},
            {**self.openers, **later.openers},
            self.walkers + later.walkers,
        )


def quick_walk(rows: Iterable[Any], stops: Stops) -> Walk | None:
    """Walks rows as ``verify_chain`` does, but only says whether all passed (None at the
    first that does not; the sequential walk names the break)."""
    prev_seq, prev_hash = 0, ""
    count = 0
    hash_at: dict[int, str] = {}
    openers: dict[int, str] = {}
    first: tuple[int, str] | None = None
    for row in rows:
        seq, digest = row[_SEQ_AT], row[_HASH_AT]
        if first is None:
            first = (seq, row[_PREV_AT])
        elif seq != prev_seq + 1 or row[_PREV_AT] != prev_hash:
            return None
        if values_hash(tuple(row[:_FIELDS])) != digest:
            return None
        count += 1
        if seq in stops.wanted:
            hash_at[seq] = digest
        if seq in stops.opening:
            openers[seq] = row.time
        prev_seq, prev_hash = seq, digest
    if first is None:
        return Walk(0, "", 0, "", 0, {}, {})
    return Walk(first[0], first[1], prev_seq, prev_hash, count, hash_at, openers)


def verify_chain(
    tenant: str,
    events: Iterable[Any],
    checkpoints: Sequence[CheckpointRecord],
    keys: CheckpointKeys,
    seq_of_hash: Callable[[str], int | None],
    start_after: tuple[int, str] = (0, GENESIS),
    to_seq: int | None = None,
    witnesses: Sequence[WitnessedHeads] = (),
    cadence: Cadence | None = None,
    walked: Callable[[Stops], Walk | None] | None = None,
) -> Report:
    """Walks ``events`` (rows with the hashed fields, ``seq`` and ``hash``, in seq order,
    starting right after ``start_after`` = (seq, hash)), the ``checkpoints`` and witnessed
    heads that fall in the checked range, and the cadence of the valid checkpoints;
    returns the first break by position, if any.

    ``walked``, when given, walks the events some faster way (in parallel:
    ``reachstore_server/audit/parallel_walk.py``) and returns what it found, or None when some
    stretch did not pass; ``events`` are then walked here, one by one, to name the break."""
    report = Report()
    breaks: list[Break] = []
    from_seq = start_after[0] + 1
    in_range = [c for c in checkpoints if to_seq is None or c.seq <= to_seq]
    witnessed = [
        (w.name, h)
        for w in witnesses
        for h in w.heads
        if h.seq >= from_seq and (to_seq is None or h.seq <= to_seq)
    ]
    prev_seq, prev_hash = start_after
    before_prev: str | None = None
    hash_at: dict[int, str] = {}
    wanted = {c.seq for c in in_range} | {h.seq for _, h in witnessed}
    # The first event after each checkpoint (and the chain's first event) opens a stretch
    # the next checkpoint must close in time; its time is all the cadence check needs.
    openers: dict[int, str] = {}
    opening = {from_seq} | {c.seq + 1 for c in in_range}
    quick = walked(Stops(frozenset(wanted), frozenset(opening))) if walked else None
    if quick is not None and quick.joins(start_after):
        report.events_checked, report.walkers = quick.count, quick.walkers
        hash_at, openers = quick.hash_at, quick.openers
        prev_seq = quick.last_seq
        events = ()
    for row in events:
        report.events_checked += 1
        seq, digest = row[_SEQ_AT], row[_HASH_AT]
        # The common case inline (a million events pass through here); a row that fails
        # any check is looked at again to name its break.
        if (
            seq != prev_seq + 1
            or row[_PREV_AT] != prev_hash
            or values_hash(tuple(row[:_FIELDS])) != digest
        ):
            found = _check_event(tenant, row, prev_seq, prev_hash, before_prev, seq_of_hash)
            if found is not None:
                breaks.append(found)
                break
        if seq in wanted:
            hash_at[seq] = digest
        if seq in opening:
            openers[seq] = row.time
        before_prev, prev_seq, prev_hash = prev_hash, seq, digest
    chain_end = prev_seq if not breaks else None

    first_ed25519 = min(
        [c.seq for c in checkpoints if not c.key_id.startswith(HMAC_PREFIX)]
        + [h.seq for w in witnesses for h in w.heads],
        default=None,
    )
    for name, head in witnessed:
        found = _check_head(tenant, head, hash_at, chain_end, f"the head witnessed by {name}")
        if found is not None:
            breaks.append(found)
    valid: list[CheckpointRecord] = []
    for checkpoint in in_range:
        report.checkpoints_checked += 1
        found = _check_signature(tenant, checkpoint, keys, first_ed25519)
        if found is None:
            found = _check_head(
                tenant,
                checkpoint,
                hash_at,
                chain_end,
                f"its signed checkpoint of {checkpoint.signed_at}",
            )
            valid.append(checkpoint)
        if found is not None:
            breaks.append(found)
    # Only checkpoint lines have a database checkpoint to match; appended and unvouched heads
    # pin the chain (``_check_head`` above) but are not checkpoints.
    signed = [(name, head) for name, head in witnessed if head.kind == CHECKPOINT]
    breaks.extend(_cross_check(tenant, in_range, valid, witnesses, signed))
    breaks.extend(_unvouched(tenant, witnessed))
    if cadence is not None and chain_end is not None:
        found = _check_cadence(tenant, openers, valid, chain_end, cadence)
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
    if row.seq <= prev_seq:
        return Break(
            INSERTED,
            tenant,
            row.seq,
            row.event_id,
            f"a second event at position {row.seq}: the chain already reached {prev_seq}",
        )
    if values_hash(tuple(row[:_FIELDS])) != row.hash:
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


def _check_signature(
    tenant: str, c: CheckpointRecord, keys: CheckpointKeys, first_ed25519: int | None
) -> Break | None:
    if c.key_id.startswith(HMAC_PREFIX) and first_ed25519 is not None and c.seq >= first_ed25519:
        return Break(
            FORGED_CHECKPOINT,
            tenant,
            c.seq,
            "",
            f"the checkpoint at position {c.seq} (signed_at {c.signed_at}) is HMAC-signed, "
            f"but Ed25519 checkpoints began at position {first_ed25519}: the HMAC key signs "
            "nothing any more",
        )
    problem = keys.check(c.key_id, c.tenant, c.seq, c.head_hash, c.signed_at, c.signature)
    if problem is None and c.tenant != tenant:
        problem = f"it was signed for the tenant {c.tenant!r}"
    if problem is not None:
        return Break(
            FORGED_CHECKPOINT,
            tenant,
            c.seq,
            "",
            f"the checkpoint at position {c.seq} (signed_at {c.signed_at}) is forged: {problem}",
        )
    return None


def _check_head(
    tenant: str, head: Head, hash_at: dict[int, str], chain_end: int | None, what: str
) -> Break | None:
    """A signed head (a checkpoint's or a witness's) against the chain."""
    if head.seq in hash_at:
        if hash_at[head.seq] != head.head_hash:
            return Break(
                REWRITTEN, tenant, head.seq, "", f"position {head.seq} differs from {what}"
            )
        return None
    if chain_end is not None and head.seq > chain_end:
        return Break(
            TRUNCATED,
            tenant,
            chain_end + 1,
            "",
            f"the chain ends at {chain_end}; {what} (signed_at {head.signed_at}) is at "
            f"position {head.seq}",
        )
    return None


def _cross_check(
    tenant: str,
    in_range: Sequence[CheckpointRecord],
    valid: Sequence[CheckpointRecord],
    witnesses: Sequence[WitnessedHeads],
    witnessed: Sequence[tuple[str, Head]],
) -> list[Break]:
    """The database's checkpoints against each witness's heads, both ways."""
    found: list[Break] = []
    stored = {(c.seq, c.head_hash, c.signed_at, c.signature) for c in in_range}
    for name, head in witnessed:
        if (head.seq, head.head_hash, head.signed_at, head.signature) not in stored:
            found.append(
                Break(
                    CHECKPOINT_MISSING,
                    tenant,
                    head.seq,
                    "",
                    f"{name} holds the checkpoint at position {head.seq} (signed_at "
                    f"{head.signed_at}); the database does not",
                )
            )
    for witness in witnesses:
        kept = {(h.seq, h.signature) for h in witness.heads}
        for c in valid:
            if c.key_id.startswith(HMAC_PREFIX) or (c.seq, c.signature) in kept:
                continue
            found.append(
                Break(
                    WITNESS_INCOMPLETE,
                    tenant,
                    c.seq,
                    "",
                    f"{witness.name} lacks the checkpoint at position {c.seq} (signed_at "
                    f"{c.signed_at}): lines were removed from it, or it never got them",
                )
            )
    return found


def _unvouched(tenant: str, witnessed: Sequence[tuple[str, Head]]) -> list[Break]:
    """One break per unvouched head: from the position after the last head a witness kept
    before it (a checkpoint or an append), to the head."""
    # Checkpoints and appended heads a witness kept *before* the unvouched line pin the
    # chain up to their position: only what lies beyond the last of them had no copy
    # outside the database when the process that stored it stopped. (A checkpoint signed
    # after the restart vouches for nothing before it.)
    found = []
    pinned: dict[str, int] = {}
    for name, head in witnessed:
        if head.kind != UNVOUCHED:
            pinned[name] = max(pinned.get(name, 0), head.seq)
            continue
        start = min(pinned.get(name, 0), head.seq) + 1
        if start > head.seq:
            continue
        found.append(
            Break(
                UNVOUCHED_TAIL,
                tenant,
                start,
                "",
                f"positions {start} to {head.seq} were stored by an audit process that "
                f"stopped without signing them ({name} has them as unvouched since "
                f"{head.signed_at}): nothing vouches that they are as they were stored",
            )
        )
    return found


def _when(text: str) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _check_cadence(
    tenant: str,
    openers: dict[int, str],
    valid: Sequence[CheckpointRecord],
    chain_end: int,
    cadence: Cadence,
) -> Break | None:
    """Each stretch of events must be closed by a checkpoint signed at most the interval
    and grace after the stretch's first event; the unsigned tail is judged against now."""
    closing: dict[int, dt.datetime] = {}
    for c in valid:
        signed = _when(c.signed_at)
        if signed is not None and (c.seq not in closing or signed < closing[c.seq]):
            closing[c.seq] = signed
    stops = sorted(closing)
    for seq in sorted(openers):
        opened = _when(openers[seq])
        if opened is None:
            continue
        due = opened + cadence.allowed
        at = bisect.bisect_left(stops, seq)
        closer = stops[at] if at < len(stops) else None
        closed_at = closing[closer] if closer is not None else cadence.now
        if closed_at > due:
            where = (
                f"the next checkpoint (position {closer}) was signed at {closed_at.isoformat()}"
                if closer is not None
                else f"no checkpoint covers it (the chain ends at {chain_end})"
            )
            return Break(
                CADENCE_GAP,
                tenant,
                seq,
                "",
                f"event {seq} of {openers[seq]} was due in a checkpoint by {due.isoformat()} "
                f"(every {cadence.interval_s:g} s, {cadence.grace_s:g} s grace); {where}",
            )
    return None
