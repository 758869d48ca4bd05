"""What a service needs to audit its calls and ship its events: one call from each
composition root."""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit_client.calls import CallAuditor
from reachstore_server.audit_client.shipper import Shipper
from reachstore_server.common.config import Settings
from reachstore_server.common.pii import Masker, masker_from_env


def auditing(
    sessions: sessionmaker[Session], settings: Settings, services: Sequence[str]
) -> tuple[CallAuditor, list[Callable[[], Coroutine[Any, Any, None]]], Masker]:
    """The call auditor for ``serve``, the shipper to run beside it (none while no audit
    address is configured: events then wait in the outbox), and the process's masker."""
    masker = masker_from_env(os.environ)
    auditor = CallAuditor(sessions, masker, settings.audit_reads)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = []
    if settings.audit_addr:
        shipper = Shipper(
            sessions, services, settings.audit_addr, settings.audit_shipper_key, settings.tls
        )
        background.append(shipper.run)
    return auditor, background, masker
