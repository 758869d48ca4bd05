"""Signing checkpoints on their cadence and handing them to the witnesses, and the two
ages an operator watches: of the last checkpoint, and of the last head a witness kept.

Checkpoints are due every ``REACHSTORE_AUDIT_CHECKPOINT_S`` while events arrive (a chain
that did not move needs none); ``reachstore_server/audit/verify.py`` reports a stretch of events
left unsigned for longer, plus its grace, as a ``cadence_gap``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reachstore_server.audit.signing import PrivateKey
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.witness import Delivery
from reachstore_server.common.metrics_http import serve_metrics
from reachstore_server.common.tls import PLAIN, TlsFiles

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, store: AuditStore, key: PrivateKey, delivery: Delivery) -> None:
        self.store = store
        self.key = key
        self.delivery = delivery
        self.last_checkpoint_at: float | None = None

    def start(self) -> None:
        """Before the service takes any event: reads when the newest checkpoint was signed,
        witnesses each tenant's latest checkpoint that a witness lacks (the process stopped
        between the two), and witnesses as ``unvouched`` every chain stored beyond its last
        checkpoint. A process that stops cleanly signs everything first, so such a tail was
        left by one that did not, and whoever could write the database since could have
        changed it: signing it now as an ordinary checkpoint would vouch for that.
        ``reachstore_server/audit/verify.py`` reports each as an ``unvouched_tail``."""
        last = self.store.last_signed_at()
        if last is not None:
            self.last_checkpoint_at = dt.datetime.fromisoformat(last).timestamp()
        if self.delivery.witnesses:
            unvouched = self.store.unsigned_heads(self.key)
            for head in unvouched:
                log.warning(
                    "tenant %s: positions up to %d were stored but never signed by the "
                    "process that stored them; witnessed as unvouched",
                    head.tenant,
                    head.seq,
                )
            failed = self.delivery.catch_up(self.store.latest_checkpoints(), time.time)
            failed += self.delivery.deliver(unvouched, time.time)
            for name in sorted(set(failed)):
                log.warning("witness %s is not answering; its copies wait", name)

    def witness_appends(self, tenants: Sequence[str]) -> None:
        """Right after an append, before it is acknowledged: the heads of the chains it
        moved go to every witness. Without this, events stored since the last checkpoint
        exist only in the database, and whoever owns it could delete them, head and all,
        before any tick. A witness that is away gets them on a later tick."""
        if not self.delivery.witnesses or not tenants:
            return
        heads = self.store.appended_heads(self.key, tenants)
        for name in self.delivery.deliver(heads, time.time):
            log.warning("witness %s is not answering; appended heads wait for it", name)

    def tick(self) -> int:
        signed = self.store.checkpoint(self.key)
        if signed:
            self.last_checkpoint_at = time.time()
        for name in self.delivery.deliver(signed, time.time):
            log.warning("witness %s is not answering; its copies wait for the next tick", name)
        return len(signed)

    async def run(self, every_s: int) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                written = await asyncio.to_thread(self.tick)
                if written:
                    log.info("signed %d checkpoint(s)", written)
            except Exception:  # noqa: BLE001 - the next tick tries again
                log.exception("signing checkpoints failed")


class CheckpointAges(Collector):
    """``reachstore_audit_last_checkpoint_age_seconds`` and
    ``reachstore_audit_last_witnessed_age_seconds`` (absent until there is one). Both grow
    while no events arrive; an alert wants them against the interval while events do."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self._checkpointer = checkpointer

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.time()
        for name, at, what in (
            ("reachstore_audit_last_checkpoint_age_seconds",
             self._checkpointer.last_checkpoint_at, "the newest signed checkpoint"),
            ("reachstore_audit_last_witnessed_age_seconds",
             self._checkpointer.delivery.last_witnessed_at,
             "the newest checkpoint every witness has kept"),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, f"Seconds since {what}.")
            if at is not None:
                family.add_metric([], max(0.0, now - at))
            yield family


def serve_ages(
    checkpointer: Checkpointer,
    address: str,
    allowed_hosts: Iterable[str] = (),
    tls: TlsFiles = PLAIN,
    registry: CollectorRegistry | None = None,
) -> None:
    """Exposes the ages (with whatever else ``registry`` holds) in Prometheus text format
    at http://address/metrics, behind the same host and TLS rules as every metrics port
    (``reachstore_server/common/metrics_http.py``)."""
    registry = registry or CollectorRegistry()
    registry.register(CheckpointAges(checkpointer))
    serve_metrics(address, registry, allowed_hosts, tls)
