"""A dropped index's memory goes back to the system (reachstore_server/query/freed_memory.py):
a member that drops the namespaces placed elsewhere must actually shrink (docs/SHARDS.md).

Run in a fresh interpreter, so that the RSS read is this scenario's alone: four indexes of
synthetic chunks are built one after another, the last two are dropped, and the RSS must
fall by at least half of what those two added. With only the garbage collector it fell by
about a quarter (glibc keeps freed pages), which is what this test catches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCENARIO = textwrap.dedent(
    """
    import json, random
    import numpy as np
    from reachstore_server.query import freed_memory
    from reachstore_server.query.index import ChunkRecord, NamespaceIndex

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

    words = [f"word{i}" for i in range(20000)]
    rng, picks = np.random.default_rng(7), random.Random(7)

    def build(n):
        index = NamespaceIndex(512)
        for i in range(n):
            vector = rng.standard_normal(512).astype(np.float32)
            vector /= np.linalg.norm(vector)
            text = " ".join(picks.choices(words, k=80))
            record = ChunkRecord(i, f"d{i}", 0, text, {"k": str(i)}, "h", vector)
            index.upsert_document(f"d{i}", [record])
        return index

    before = rss_mib()
    kept = [build(2500), build(2500)]
    middle = rss_mib()
    dropped = [build(2500), build(2500)]
    full = rss_mib()
    del dropped
    freed_memory.give_back()
    print(json.dumps({"before": before, "middle": middle, "full": full, "after": rss_mib()}))
    """
)


def test_dropping_indexes_gives_their_memory_back() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCENARIO], capture_output=True, text=True, timeout=300, check=True
    )
    rss = json.loads(out.stdout)
    added = rss["full"] - rss["middle"]
    assert added > 10, rss  # the two dropped indexes took real memory
    assert rss["full"] - rss["after"] >= added / 2, rss
