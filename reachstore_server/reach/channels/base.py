"""The four-method channel interface every way out of reachstore implements.

A channel never decides retries, breakers or rate limits (the executor does, the same way
for every channel); it only speaks its protocol and classifies what came back:

- ``validate`` checks an action's parameters without any side effect;
- ``submit`` sends it once and returns at once (never waits for the outcome);
- ``poll`` looks the outcome up; a look-up that cannot decide answers UNKNOWN, never FAILED;
- ``cancel`` asks the receiver to cancel, and may answer that it cannot.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, Literal, Protocol

# Receipts keep at most this many characters of what the receiver said.
SNIPPET_CHARS = 512

Category = Literal["auth", "permanent", "transient", "timeout", "quota"]


class Status(enum.Enum):
    """An action's outcome as the receiver sees it."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Outgoing:
    """One action as a channel sees it."""

    action_id: str
    idempotency_key: str
    action_type: str
    params: Mapping[str, Any]
    trace_id: str
    tenant: str
    entity_id: str


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the receiver said to a submit, a poll or a cancel."""

    status: Status
    external_id: str = ""
    status_code: int = 0  # HTTP status, SMTP reply code or gRPC status code; 0 for none
    snippet: str = ""  # raw and unmasked: the executor masks and bounds it
    duration_ms: int = 0
    detail: str = ""  # why, in words, when the status is FAILED or UNKNOWN


class ChannelError(Exception):
    """A submit that did not get the action accepted.

    ``ambiguous`` says the request may have reached the receiver and taken effect (the
    connection dropped or timed out after the request was sent): the executor then
    re-sends only where that is known to be harmless, and otherwise marks the action
    UNKNOWN.
    """

    def __init__(
        self,
        category: Category,
        code: str,
        message: str,
        *,
        retry_after_s: float | None = None,
        business: bool = False,
        ambiguous: bool = False,
        status_code: int = 0,
        snippet: str = "",
        duration_ms: int = 0,
    ) -> None:
        super().__init__(message)
        self.category = category
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.business = business
        self.ambiguous = ambiguous
        self.status_code = status_code
        self.snippet = snippet
        self.duration_ms = duration_ms


class InvalidParams(Exception):
    """``validate`` found a parameter the channel cannot send.

    ``field`` is a dotted path below ``params`` (empty for the whole object); ``rule``
    says in words what a valid value looks like.
    """

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"params{'.' + field if field else ''}: {rule}")
        self.field = field
        self.rule = rule


class Channel(Protocol):
    """What the executor needs of a channel."""

    @property
    def can_poll(self) -> bool: ...
    @property
    def can_cancel(self) -> bool: ...
    @property
    def sends_idempotency_key(self) -> bool:
        """Whether the receiver is given the idempotency key (sending it is not the
        receiver honouring it: ``receiver_deduplicates`` in the channel's config says so)."""

    def send_deadline(self) -> tuple[str, float]:
        """The longest a submit may take, connect, write and read together, with the
        settings it comes from in words; the executor cuts a submit off there."""

    def validate(self, action: Outgoing) -> None:
        """Raises ``InvalidParams``; no I/O, no side effect."""

    async def submit(self, action: Outgoing) -> Answer:
        """Sends the action once. Returns SUCCESS (done at once) or PENDING (accepted;
        ``poll`` will tell); raises ``ChannelError`` otherwise. Never retries."""

    async def poll(self, action: Outgoing, external_id: str) -> Answer:
        """Looks the outcome up. Never raises: what it cannot decide is UNKNOWN."""

    async def cancel(self, action: Outgoing, external_id: str) -> bool:
        """Asks the receiver to cancel; False when it cannot. Never raises."""

    async def start(self) -> None:
        """Best-effort warm-up (e.g. learning a service's types); never raises."""

    async def close(self) -> None:
        """Releases connections."""
