"""The fault checker as a test: the short run on SQLite and on PostgreSQL.

``FAULTS_*`` variables (see ``checker``) make it longer or aim it; ``make faults`` runs the
long version as a command. The counts are printed (run with ``-s`` to see them); the evidence
of every property broken is the assertion message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.checker import Settings, run

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_reach_keeps_at_most_once_under_faults(tmp_path: Path, database: str) -> None:
    """Two workers, a few hundred actions on every kind of channel, receivers that answer
    late, trickle, drop, refuse and ignore keys, a nemesis that kills, freezes and skews
    workers and restarts the database: no effect twice, no dishonest ``failed``, no lost
    receipt, nothing lost or stuck."""
    settings = Settings.from_env(database)
    report = run(settings, tmp_path)
    print(report.counts())
    assert not report.violations, (
        f"properties broken: {', '.join(report.broken)} (seed {settings.seed}; "
        f"FAULTS_SEED={settings.seed} repeats the faults)\n{report.details()}"
    )
