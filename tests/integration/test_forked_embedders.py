"""The embedder's forked copies (``reachstore_server/embedding/forked.py``) as processes: a real
parent started with ``python``, its copies found in /proc, the parent killed with SIGKILL.
The copies must not outlive it (a copy waiting forever on a pipe it holds open itself
would keep a dead ingest process's output, and its memory, alive)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from reachstore_server.embedding.forked import ForkedEmbedders

    class Lengths:
        # Stands in for the model: the process tree is what is under test here.
        model_id, dimension = "lengths", 1
        def embed(self, texts):
            return np.array([[len(t)] for t in texts], dtype=np.float32)

    embedder = ForkedEmbedders.start(Lengths(), 3)
    vectors = embedder.embed([f"text {n}" * n for n in range(12)])
    assert vectors[:, 0].tolist() == [len(f"text {n}" * n) for n in range(12)], vectors
    print(" ".join(map(str, embedder.pids)), flush=True)
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_copies_end_when_their_parent_is_killed() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]),
    }
    with subprocess.Popen(
        [sys.executable, "-c", PARENT], env=env, stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3 and all(alive(p) for p in pids), pids
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if alive(p)], "copies outlived their parent"
