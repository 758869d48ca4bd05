"""What a verification checks against, put together once: the checkpoint keys, the
witnesses and the expected cadence. The audit service's Verify and `reachstore audit
verify` both go through ``Verifier`` (``reachstore_server/audit/verify.py`` holds the checks)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Mapping, Sequence

import httpx

from reachstore_server.audit.signing import CheckpointKeys
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import (
    WITNESS_INCOMPLETE,
    Break,
    Cadence,
    Report,
    WitnessedHeads,
)
from reachstore_server.audit.witness import Witness, WitnessRead, read_lines
from reachstore_server.common.config_errors import ConfigError

CADENCE_GRACE = "REACHSTORE_AUDIT_CADENCE_GRACE_S"
DEFAULT_GRACE_S = 300.0
WITNESS_BROKEN = "witness_broken"
# A checkpoint the witnesses lack is looked for again this many times, this far apart, before
# it is a break: its delivery (an fsync-ed append, or a POST) may still be under way.
INCOMPLETE_REREADS = 3
INCOMPLETE_REREAD_PAUSE_S = 0.2


def cadence_from_env(env: Mapping[str, str], interval_s: float) -> Cadence:
    text = env.get(CADENCE_GRACE, "") or str(DEFAULT_GRACE_S)
    try:
        grace = float(text)
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise ConfigError(f"{CADENCE_GRACE}: a number of seconds, 0 or more, got {text!r}")
    return Cadence(interval_s, grace, dt.datetime.now(dt.UTC))


@dataclasses.dataclass
class Verifier:
    keys: CheckpointKeys
    witnesses: Sequence[Witness] = ()
    cadence: Cadence | None = None

    def read_witnesses(self) -> list[WitnessRead]:
        """Every witness's lines, checked; OSError or httpx.HTTPError when one cannot be
        read (that is no verdict: the caller says it could not check)."""
        return [read_lines(w.name, w.lines(), self.keys.public) for w in self.witnesses]

    @staticmethod
    def every_tenant(store: AuditStore, reads: Sequence[WitnessRead]) -> list[str]:
        """The tenants to verify for "all of them": those the database lists, and those a
        witness holds heads of. A tenant deleted from the database entirely (or renamed)
        then still has its witnessed heads checked, against a chain that is no longer
        there."""
        witnessed = {head.tenant for read in reads for head in read.heads}
        return sorted(set(store.tenants()) | witnessed)

    def verify(
        self,
        store: AuditStore,
        tenants: Sequence[str],
        from_seq: int = 1,
        to_seq: int | None = None,
        reads: Sequence[WitnessRead] | None = None,
    ) -> list[tuple[str, Report]]:
        """Each tenant's chain to its end (one broken tenant does not hide another). A
        witness line that fails its own checks is a break of the tenant it names."""
        reads = self.read_witnesses() if reads is None else reads
        heads = [WitnessedHeads(r.name, r.heads) for r in reads]
        cadence = self.cadence
        if cadence is not None:
            cadence = dataclasses.replace(cadence, now=dt.datetime.now(dt.UTC))
        results = []
        for tenant in tenants:
            report = store.verify(tenant, self.keys, from_seq, to_seq, heads, cadence)
            for _ in range(INCOMPLETE_REREADS):
                # The witnesses were read before the database: a checkpoint signed between
                # the two reads is in the database and, a moment later, in the witness.
                # Lines removed from a witness's end stay removed however often it is read.
                if report.first_break is None or report.first_break.kind != WITNESS_INCOMPLETE:
                    break
                time.sleep(INCOMPLETE_REREAD_PAUSE_S)
                try:
                    reads = self.read_witnesses()
                except (OSError, httpx.HTTPError):
                    break  # the first verdict stands
                heads = [WitnessedHeads(r.name, r.heads) for r in reads]
                report = store.verify(tenant, self.keys, from_seq, to_seq, heads, cadence)
            for read in reads:
                if read.broken is None or read.broken.tenant != tenant:
                    continue
                found = Break(
                    WITNESS_BROKEN,
                    tenant,
                    read.broken.seq,
                    "",
                    f"{read.name}: {read.broken.detail}",
                )
                if report.first_break is None or found.seq <= report.first_break.seq:
                    report.first_break = found
            results.append((tenant, report))
        return results
