"""The ingest service embeds in forked copies of itself, one per core by default
(``reachstore_server/embedding/forked.py``): a real `reachstore up`, its process tree read from
/proc, documents sent over REST, the stored vectors read from the database file, and one
copy killed with SIGKILL while documents arrive.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.domain.chunking import chunk_text
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.repository import SemanticStore
from tests.e2e.conftest import ingest
from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        # The command name sits in parentheses and may hold spaces: fields follow the last.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def documents(prefix: str, count: int) -> list[dict[str, object]]:
    return [
        {
            "document_id": f"{prefix}-{n}",
            "text": f"Report {prefix} number {n}: the warehouse in zone {n % 7} shipped "
            f"{n * 13} parcels; 第{n}号仓库的发货记录。",
            "metadata": {},
        }
        for n in range(count)
    ]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSystem]:
    system = RunningSystem(
        tmp_path_factory.mktemp("embed"), {"REACHSTORE_INGEST_EMBED_PROCESSES": "2"}
    )
    system.start()
    yield system
    assert system.stop() == 0, "".join(system.output[-40:])


def stored_vectors(system: RunningSystem, namespace: str) -> dict[tuple[str, int], np.ndarray]:
    engine = make_engine(f"sqlite:///{system.data_dir / 'reachstore.db'}")
    try:
        store = SemanticStore(make_sessions(engine))
        head = store.namespace_heads("default", [namespace])[namespace]
        return {
            (c.document_id, c.chunk_index): np.frombuffer(c.embedding, dtype=np.float32)
            for c in store.chunks("default", head.id)
        }
    finally:
        engine.dispose()


def test_copies_embed_what_the_embedder_itself_would(running: RunningSystem) -> None:
    ingest_pid = running.pid("ingest")
    copies = children(ingest_pid)
    assert len(copies) == 2, f"ingest {ingest_pid} has children {copies}"
    docs = documents("a", 40)
    with httpx.Client(base_url=running.http_url, timeout=60.0) as http:
        tasks = ingest(http, "embedded", docs)
    assert [t["state"] for t in tasks] == ["completed"] * len(docs), tasks
    stored = stored_vectors(running, "embedded")
    embedder = UsemEmbedder()
    for doc in docs:
        chunks = chunk_text(str(doc["text"]))
        expected = embedder.embed(chunks)
        for i, vector in enumerate(expected):
            np.testing.assert_allclose(stored[(str(doc["document_id"]), i)], vector, atol=1e-5)
    assert len(stored) == sum(len(chunk_text(str(d["text"]))) for d in docs)


def test_a_killed_copy_leaves_ingest_working_in_its_own_process(running: RunningSystem) -> None:
    ingest_pid = running.pid("ingest")
    copies = children(ingest_pid)
    assert copies, "the copies are running"
    os.kill(copies[0], signal.SIGKILL)
    docs = documents("b", 40)
    with httpx.Client(base_url=running.http_url, timeout=60.0) as http:
        tasks = ingest(http, "after-kill", docs)
    assert [t["state"] for t in tasks] == ["completed"] * len(docs), tasks
    assert len(stored_vectors(running, "after-kill")) >= len(docs)
    os.kill(ingest_pid, 0)  # the ingest process itself lives on
    assert children(ingest_pid) == [], "the other copy was let go too"
    assert any("an embedding process ended" in line for line in running.output), "logged"
