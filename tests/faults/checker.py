"""One fault-checker run, from an empty database to a verdict; also a command:

    python -m tests.faults.checker [--database sqlite|postgresql|both]

Settings come from the environment so that the test and the command read them alike:

- ``FAULTS_SEED``: the seed (default: a random one, always printed);
- ``FAULTS_ACTIONS``: how many actions (default 240, the short run; ``make faults``: 2000);
- ``FAULTS_LOAD_S``: how long submissions and faults go on (default: 1 s per 12 actions,
  at least 20 s);
- ``FAULTS_DRAIN_S``: how long the workers get at most to finish afterwards (default 90 s;
  the drain ends as soon as nothing is being worked on, a few seconds on a quiet machine);
- ``FAULTS_ONLY``: comma-separated faults to inject (default: all of
  ``plan.RECEIVER_FAULTS`` and ``nemesis.NEMESIS_FAULTS``), to study one at a time;
- ``FAULTS_SKEW_S``: how far off a skewed worker's clock runs (default 20);
- ``FAULTS_LEGACY_CONFIG=1``: declare de-duplicating receivers the way code from before
  ``receiver_deduplicates`` understood (see ``config``).

The phases: receivers up, two workers up, then for ``load_s`` the workload submits while
the receivers and the nemesis inject faults; then the faults stop (a paused worker is
resumed, a skewed one restarted with the right clock), the workers get ``drain_s`` to
finish, every action is read back, and the properties are checked.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from tests.faults.cluster import Cluster, HarnessError, PostgresDatabase, SqliteDatabase
from tests.faults.config import PROFILES, Timing, write_config
from tests.faults.nemesis import NEMESIS_FAULTS, Nemesis
from tests.faults.plan import RECEIVER_FAULTS, FaultMix
from tests.faults.properties import Observation, check_all
from tests.faults.receivers import AlertReceiver, FaultyReceiver
from tests.faults.report import Report
from tests.faults.snapshot import drain, read_actions
from tests.faults.workload import ACTIONS_PER_TASK, Workload, check_started

SHORT_ACTIONS = 240
ALL_FAULTS = frozenset(RECEIVER_FAULTS) | frozenset(NEMESIS_FAULTS)
DATABASES = ("sqlite", "postgresql")


@dataclasses.dataclass(frozen=True)
class Settings:
    database: str
    seed: int
    actions: int
    load_s: float
    drain_s: float
    faults: frozenset[str]
    skew_s: float
    legacy_config: bool

    @property
    def tasks(self) -> int:
        return math.ceil(self.actions / ACTIONS_PER_TASK)

    @classmethod
    def from_env(cls, database: str, env: Mapping[str, str] = os.environ) -> Settings:
        actions = int(env.get("FAULTS_ACTIONS") or SHORT_ACTIONS)
        only = env.get("FAULTS_ONLY", "")
        faults = frozenset(f.strip() for f in only.split(",") if f.strip()) or ALL_FAULTS
        unknown = faults - ALL_FAULTS
        if unknown:
            raise ValueError(
                f"FAULTS_ONLY: unknown fault(s) {sorted(unknown)}; known: "
                f"{', '.join(sorted(ALL_FAULTS))}"
            )
        return cls(
            database=database,
            seed=int(env.get("FAULTS_SEED") or random.randrange(1 << 31)),
            actions=actions,
            load_s=float(env.get("FAULTS_LOAD_S") or max(20.0, actions / 12)),
            drain_s=float(env.get("FAULTS_DRAIN_S") or 90.0),
            faults=faults,
            skew_s=float(env.get("FAULTS_SKEW_S") or 20.0),
            legacy_config=env.get("FAULTS_LEGACY_CONFIG", "") in ("1", "true", "yes"),
        )

    def describe(self) -> str:
        config = "legacy (idempotency_header)" if self.legacy_config else "receiver_deduplicates"
        faults = "all" if self.faults == ALL_FAULTS else ",".join(sorted(self.faults))
        return (
            f"fault checker on {self.database}: {self.actions} actions over {self.load_s:g} s, "
            f"drain {self.drain_s:g} s, faults {faults}, skew {self.skew_s:g} s, "
            f"config {config}"
        )


def _start(cluster: Cluster, settings: Settings) -> None:
    try:
        cluster.start()
    except RuntimeError as exc:
        if "receiver_deduplicates" in str(exc) and not settings.legacy_config:
            raise RuntimeError(
                f"{exc}\nThis code refuses receiver_deduplicates; FAULTS_LEGACY_CONFIG=1 "
                "declares the de-duplicating receivers as older code understood them."
            ) from exc
        raise


class _Phases:
    """How long each phase took, for the printout (the short run has a time budget)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self.took: list[str] = []

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.took.append(f"{name} {now - self._last:.1f} s")
        self._last = now


def run(settings: Settings, workdir: Path) -> Report:
    timing = Timing()
    mix = FaultMix(settings.seed).only(settings.faults)
    receivers = {p.name: FaultyReceiver(p, mix, timing) for p in PROFILES}
    alerts = AlertReceiver(settings.seed)
    notes: list[str] = []
    phases = _Phases()
    with contextlib.ExitStack() as stack:
        for receiver in (*receivers.values(), alerts):
            stack.enter_context(receiver)
        config = write_config(
            workdir / "reach.toml",
            {name: (r.url, r.status_url) for name, r in receivers.items()},
            alerts.url,
            timing,
            settings.legacy_config,
        )
        database = (
            PostgresDatabase() if settings.database == "postgresql" else SqliteDatabase(workdir)
        )
        stack.callback(database.close)
        cluster = Cluster(workdir, database, config)
        stack.callback(cluster.kill_all)
        for receiver in (*receivers.values(), alerts):
            receiver.identify = cluster.sender_of
        _start(cluster, settings)
        phases.done("start")
        t0 = time.monotonic()
        nemesis = Nemesis(
            cluster, database, settings.seed, settings.faults, timing, settings.skew_s
        )
        workload = Workload(cluster, settings.seed, settings.tasks, list(receivers))
        nemesis.start(settings.load_s)
        try:
            workload.run(settings.load_s)
            phases.done("load")
        finally:
            nemesis.stop()
        phases.done("heal")
        if nemesis.errors:
            raise HarnessError(f"the nemesis failed: {nemesis.errors[0]!r}") from nemesis.errors[0]
        check_started(workload.submissions)
        quiet, _ = drain(cluster, settings.drain_s)
        phases.done("drain" + ("" if quiet else " (NOT quiet)"))
        known = [a for s in workload.submissions for a in s.action_ids]
        actions, missing = read_actions(cluster, known)
        phases.done("read")
        requests = [r for receiver in receivers.values() for r in receiver.requests]
        deliveries = alerts.alerts
        lookups = sum(r.lookups for r in receivers.values())
        notes.append(f"status look-ups answered: {lookups}")
        for receiver in (*receivers.values(), alerts):
            receiver.stop()  # first, so that no worker waits on a trickle to stop
        codes = cluster.stop()
        phases.done("stop")
        notes.append(f"workers' exit codes (SIGTERM at the end): {codes}")
        problems = [e for r in (*receivers.values(), alerts) for e in r.errors]
        if problems:
            raise HarnessError(f"a receiver failed: {problems[0]!r}") from problems[0]
    phases.done("cleanup")
    notes.append("phases: " + ", ".join(phases.took))
    took = sorted(s.took_s for s in workload.submissions) or [0.0]
    notes.append(
        f"SubmitTask: median {took[len(took) // 2] * 1000:.0f} ms, "
        f"slowest {took[-1] * 1000:.0f} ms (retries included)"
    )
    refusals = collections.Counter(
        s.refused.split(":")[0] for s in workload.submissions if s.refused
    )
    if refusals:
        notes.append(f"submissions refused: {dict(refusals)}")
    obs = Observation(
        seed=settings.seed,
        t0=t0,
        timing=timing,
        profiles={p.name: p for p in PROFILES},
        submissions=workload.submissions,
        actions=actions,
        missing=missing,
        requests=requests,
        alerts=deliveries,
        events=nemesis.events,
        one_writer=settings.database == "sqlite",
    )
    return Report(settings.describe(), obs, check_all(obs), notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=(*DATABASES, "both"), default="both")
    args = parser.parse_args(argv)
    failed = False
    for database in DATABASES if args.database == "both" else (args.database,):
        settings = Settings.from_env(database)
        print(f"running: {settings.describe()}, seed {settings.seed}", flush=True)
        # FAULTS_KEEP=1 keeps the workers' logs and the database of a run to read afterwards.
        if os.environ.get("FAULTS_KEEP") == "1":
            folder = tempfile.mkdtemp(prefix="reach-faults-")
            print(f"logs and database kept in {folder}", flush=True)
            report = run(settings, Path(folder))
        else:
            with tempfile.TemporaryDirectory(prefix="reach-faults-") as folder:
                report = run(settings, Path(folder))
        print(report.summary(), flush=True)
        failed |= bool(report.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
