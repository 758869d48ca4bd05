"""Value types of the audit trail: events, verification results and signed checkpoints."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class AuditEvent:
    """One recorded change (or read, when reads are audited), personal data masked.

    ``category`` is the failure's category word, ``"unspecified"`` for a success;
    ``seq``, ``prev_hash`` and ``hash`` place it in its tenant's chain. Every field but
    ``event_id`` has a default so that ``append_events`` callers name only what they set.
    """

    event_id: str
    time: str = ""
    tenant: str = ""
    caller_key_id: str = ""
    service: str = ""
    method: str = ""
    idempotency_key: str = ""
    params: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    # "ok" or the gRPC status name.
    result_status: str = ""
    error_code: str = ""
    category: str = "unspecified"
    duration_ms: int = 0
    trace_id: str = ""
    seq: int = 0
    prev_hash: str = ""
    hash: str = ""


@dataclasses.dataclass(frozen=True)
class ChainBreak:
    """The first place a chain does not verify.

    ``kind``: ``edited``, ``deleted``, ``inserted``, ``reordered``, ``truncated``,
    ``forged_checkpoint`` or ``rewritten``.
    """

    kind: str
    tenant: str
    seq: int
    event_id: str
    detail: str


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """The outcome of checking one chain (or every chain). A break is a result, not an
    error: ``ok`` is false and ``first_break`` says where and what."""

    ok: bool
    first_break: ChainBreak | None
    events_checked: int
    checkpoints_checked: int
    tenants_checked: int


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A signed statement of a chain's head (HMAC-SHA256; ``key_id`` names the key)."""

    tenant: str
    seq: int
    head_hash: str
    signed_at: str
    key_id: str
    signature: str


@dataclasses.dataclass(frozen=True)
class AppendResult:
    """What ``append_events`` stored: new events, and repeats acknowledged but not stored."""

    appended: int
    duplicates: int
