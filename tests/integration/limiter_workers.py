"""Real processes that each run the services' own call-rate limiter against one database,
for the fleet-limit attacks: each runs ``script`` (``python -c``) with ``args`` and prints
one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from reachstore_server.storage.engine import make_engine
from reachstore_server.storage.schema import migrate_to_head

ROOT = Path(__file__).resolve().parents[2]

# What every worker script starts with: the limiter's imports, and ``fallbacks``, the log
# lines of calls that fell back to the process's own buckets (the database seemed away).
PRELUDE = """
import json, logging, sys, threading, time
from reachstore_server.common.limits import Limits
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.rate_buckets import fleet_limiter
fallbacks = []
class Count(logging.Handler):
    def emit(self, record):
        fallbacks.append(record.getMessage())
logging.getLogger("reachstore_server.common.limits").addHandler(Count())
"""


def run_workers(database_url: str, script: str, args: list[str], processes: int) -> list[Any]:
    """Migrates the database, runs ``processes`` workers and returns what each printed. A
    worker that does not end within a minute (a deadlock between processes) fails."""
    engine = make_engine(database_url)
    try:
        migrate_to_head(engine)
    finally:
        engine.dispose()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    results = []
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err[-2000:]
            results.append(json.loads(out))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return results
