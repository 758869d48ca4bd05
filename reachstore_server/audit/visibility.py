"""Which events of a trail a key may read: namespace grants and channel allow-lists hold
in the audit trail as everywhere else.

A key without grants or allow-list reads its tenant's whole trail (with ``auditor``,
every tenant's). A restricted key reads only

- the events of its own calls (it knows what it sent), and
- events shown to be about what it may see: the event names at least one namespace or
  channel, each namespace inside the key's grants, each channel inside its allow-list.

Everything else — key management (whose ``namespaces`` and ``channels`` are the grants
of a key, not its subject), calls that name only an id, anything whose subject cannot be
read off its parameters — is hidden, and a hidden event is answered exactly as
a missing one. The rule errs towards hiding: an event cannot leak what it does not show.

What an event names is read from its (masked) parameters:

- namespaces: ``namespace`` (text) and ``namespaces`` (a list) at the top level, and
  ``name`` in the ingest service's namespace calls. The masker masks every field called
  ``name``, so those show a token, which no grant pattern covers: a key with namespace
  grants sees such an event only when it made the call.
- channels: ``channel`` at the top level (action events, list filters), ``action.channel``
  (Reach) and ``actions[].channel`` (SubmitTask).

A value that is not plain text (a list the trail cut short) cannot be attributed, so the
event stays hidden from restricted keys.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from reachstore_server.common.auth import Caller
from reachstore_server.storage.audit_models import AuditEventRow

_NAMESPACE_CALLS = frozenset({"CreateNamespace", "GetNamespace", "DeleteNamespace"})
# Services whose calls are never about a namespace or channel, even when their parameters
# name some: a key's ``namespaces`` and ``channels`` are the grants it is given, and who
# holds which grants is key management, which restricted keys do not see.
_UNATTRIBUTABLE_SERVICES = frozenset({"admin"})


@dataclasses.dataclass(frozen=True)
class Subject:
    """What an event is about, as far as its parameters tell."""

    namespaces: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    opaque: bool = False  # names something in a form no grant can be checked against


def subject_of(service: str, method: str, params: Mapping[str, Any]) -> Subject:
    if service in _UNATTRIBUTABLE_SERVICES:
        return Subject(opaque=True)
    namespaces: list[Any] = []
    channels: list[Any] = []
    if "namespace" in params:
        namespaces.append(params["namespace"])
    listed = params.get("namespaces", [])
    namespaces.extend(listed if isinstance(listed, list) else [listed])
    if service == "ingest" and method in _NAMESPACE_CALLS and "name" in params:
        namespaces.append(params["name"])
    if "channel" in params:
        channels.append(params["channel"])
    action = params.get("action")
    if isinstance(action, Mapping) and "channel" in action:
        channels.append(action["channel"])
    actions = params.get("actions", [])
    for item in actions if isinstance(actions, list) else [actions]:
        channels.append(item.get("channel") if isinstance(item, Mapping) else item)
    named = [*namespaces, *channels]
    return Subject(
        tuple(n for n in namespaces if isinstance(n, str)),
        tuple(c for c in channels if isinstance(c, str)),
        opaque=any(not isinstance(value, str) for value in named),
    )


def may_read(who: Caller, row: AuditEventRow) -> bool:
    """Whether ``who`` may read the event (its tenant is checked by the caller)."""
    if not who.restricted or (who.key_id and row.caller_key_id == who.key_id):
        return True
    try:
        params = json.loads(row.params_json)
    except ValueError:
        return False
    subject = subject_of(row.service, row.method, params if isinstance(params, dict) else {})
    if subject.opaque or not (subject.namespaces or subject.channels):
        return False
    return all(who.may_use(n) for n in subject.namespaces) and all(
        who.may_reach(c) for c in subject.channels
    )
