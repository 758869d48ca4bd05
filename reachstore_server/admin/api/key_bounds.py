"""What a key made over the API may hold: no more than the key that makes it.

- Scopes: a subset of the creator's, and never ``auditor`` or ``internal``
  (``CLI_ONLY_SCOPES``): those reach beyond one tenant, so only the operator gives them,
  with `reachstore keys create`.
- Namespace grants and channel allow-lists: each pattern inside one of the creator's
  (``patterns.covers``). An empty list means "as wide as the creator": the creator's own
  list, so a restricted creator cannot make an unrestricted key by asking for nothing.
- Groups: a subset of the creator's (channel rules grant by group membership).
- Lifetime: ends no later than the creator's; "no expiry" becomes the creator's expiry.

The same bound decides which keys a key may list and revoke (``manages``): a key with
namespace grants or a channel allow-list manages only keys inside them, so a restricted
admin can neither read other keys' grants nor switch off a wider key. Scopes do not enter
into it: an unrestricted admin manages every key of its tenant, as it always has.

The command line (the operator, on the store) is not bounded: it is where keys start.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

from reachstore_server.common import errors, patterns
from reachstore_server.common.auth import CLI_ONLY_SCOPES, Caller
from reachstore_server.storage.keys import KeyRecord, KeySpec


def _beyond(field: str, rule: str, **data: Any) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.KEY_EXCEEDS_CREATOR,
        f"{field}: {rule}",
        field=field,
        structured_data={"rule": rule, **data},
    )


def bounded(spec: KeySpec, creator: Caller, now: dt.datetime) -> KeySpec:
    """``spec`` as the creator may grant it (its empty lists filled from the creator's),
    or KEY_EXCEEDS_CREATOR naming the first field that asks for more."""
    special = sorted(set(spec.scopes) & CLI_ONLY_SCOPES)
    if special:
        raise _beyond(
            "scopes",
            f"{', '.join(special)} keys are made by the operator with `reachstore keys "
            "create`, not over the API",
            not_allowed=special,
        )
    lacking = sorted(set(spec.scopes) - creator.scopes)
    if lacking:
        raise _beyond(
            "scopes",
            f"the key making it does not hold {', '.join(lacking)}",
            not_held=lacking,
            creator_scopes=sorted(creator.scopes),
        )
    namespaces = _within("namespaces", spec.namespaces, creator.namespaces)
    channels = _within("channels", spec.channels, creator.channels)
    for i, group in enumerate(spec.groups):
        if group not in creator.groups:
            raise _beyond(
                f"groups[{i}]",
                "a group of the key making it",
                creator_groups=list(creator.groups),
            )
    return dataclasses.replace(
        spec,
        namespaces=namespaces,
        channels=channels,
        expires_at=_lifetime(spec.expires_at, creator.expires_at, now),
    )


def _within(field: str, asked: tuple[str, ...], own: tuple[str, ...]) -> tuple[str, ...]:
    if not asked:
        return own
    for i, pattern in enumerate(asked):
        if not patterns.covered(pattern, own):
            raise _beyond(
                f"{field}[{i}]",
                "must stay inside one of the patterns of the key making it",
                creator_patterns=list(own),
            )
    return asked


def _lifetime(
    asked: dt.datetime | None, own: dt.datetime | None, now: dt.datetime
) -> dt.datetime | None:
    if own is None:
        return asked
    if asked is None:
        return own
    if asked > own:
        left = max(0, math.floor((own - now).total_seconds()))
        raise _beyond(
            "ttl_seconds",
            f"the key making it expires in {left} seconds; a key it makes cannot outlive it",
            limit=left,
        )
    return asked


def manages(who: Caller, record: KeyRecord) -> bool:
    """Whether ``who`` may see and revoke the key: one of its tenant, and inside its grants
    and allow-list when it has them (a key without them is outside any)."""
    return (
        record.tenant == who.tenant
        and _inside(record.namespaces, who.namespaces)
        and _inside(record.channels, who.channels)
    )


def _inside(theirs: tuple[str, ...], own: tuple[str, ...]) -> bool:
    return not own or (bool(theirs) and all(patterns.covered(p, own) for p in theirs))
