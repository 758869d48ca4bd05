"""The weekly UNKNOWN review: every action that passed through UNKNOWN in a period, grouped
by channel and by how it was settled.

UNKNOWN is where at-most-once pays its price: an action whose send may have arrived is
neither failed nor succeeded until a look-up or a person says which (docs/AT_MOST_ONCE.md).
Read once a week, the list shows which channels produce them, how many the receiver's
status look-up settled on its own, how many took a person, and which are still open — what
tells an operator to give a channel a status URL, shorter timeouts, or a word with its
owner. ``reachstore reach unknowns --since 7d`` and the console's review page show it.

Pure: the store hands in each action's history (``ReachStore.unknown_review_rows``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from reachstore_server.reach import states as st

# How an action that went through UNKNOWN was settled.
BY_LOOKUP = "lookup"  # the receiver's status look-up (or a late answer) decided it
BY_OPERATOR = "operator"  # a person resolved it (ResolveAction)
BY_CANCEL = "cancelled"  # cancelled on request while its outcome was unknown
STILL_OPEN = "open"  # still unknown or waiting for review
SETTLEMENTS = (BY_LOOKUP, BY_OPERATOR, BY_CANCEL, STILL_OPEN)
# Entries shown per group at most; the group's count is always the whole number.
MAX_LISTED = 100


@dataclasses.dataclass(frozen=True)
class Passed:
    """An action that entered UNKNOWN in the period, as the store reads it."""

    action_id: str
    task_id: str
    name: str
    channel: str
    state: str
    resolution: Mapping[str, Any]
    history: list[tuple[dt.datetime, str, str]]  # (at, to_state, reason), oldest first


@dataclasses.dataclass(frozen=True)
class Entry:
    action_id: str
    task_id: str
    name: str
    state: str
    entered_unknown_at: dt.datetime
    settled_at: dt.datetime | None
    resolved_by: str
    note: str


@dataclasses.dataclass
class Group:
    channel: str
    settled_by: str
    state: str  # the actions' state now: how they ended, or where they wait
    count: int = 0
    entries: list[Entry] = dataclasses.field(default_factory=list)


def settlement(action: Passed) -> tuple[str, dt.datetime | None]:
    """How ``action`` was settled after its first UNKNOWN, and when."""
    if action.state in st.RESOLVABLE:
        return STILL_OPEN, None
    final = next(
        ((at, reason) for at, to_state, reason in reversed(action.history) if to_state in st.FINAL),
        None,
    )
    at = final[0] if final else None
    reason = final[1] if final else ""
    if reason.startswith("resolved_") or action.resolution:
        return BY_OPERATOR, at
    if action.state == st.CANCELLED:
        return BY_CANCEL, at
    return BY_LOOKUP, at


def _utc(value: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes; everything is stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def review(actions: Iterable[Passed]) -> list[Group]:
    """The groups, by channel, then settlement (in ``SETTLEMENTS`` order), then state;
    in each, the actions by when they entered UNKNOWN, at most ``MAX_LISTED``."""
    groups: dict[tuple[str, str, str], Group] = {}
    for action in actions:
        how, settled_at = settlement(action)
        entered = next(
            (at for at, to_state, _ in action.history if to_state == st.UNKNOWN),
            action.history[0][0],
        )
        group = groups.setdefault(
            (action.channel, how, action.state), Group(action.channel, how, action.state)
        )
        group.count += 1
        group.entries.append(
            Entry(
                action_id=action.action_id,
                task_id=action.task_id,
                name=action.name,
                state=action.state,
                entered_unknown_at=_utc(entered),
                settled_at=_utc(settled_at) if settled_at else None,
                resolved_by=str(action.resolution.get("resolved_by", "")),
                note=str(action.resolution.get("note", "")),
            )
        )
    ordered = sorted(
        groups.values(), key=lambda g: (g.channel, SETTLEMENTS.index(g.settled_by), g.state)
    )
    for group in ordered:
        group.entries.sort(key=lambda e: (e.entered_unknown_at, e.action_id))
        del group.entries[MAX_LISTED:]
    return ordered
