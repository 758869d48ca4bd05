"""How a query replica learns of new documents: read the change sequence on every query
(what the query service does), or listen for PostgreSQL notifications — measured.

A replica must answer "once an ingest task reports completed, the next query returns the
document". Two ways to know a namespace changed:

* read:   before each search, read the namespace's row (id, model, change seq) and replay
          the changes since the index's own seq. Always current; costs one indexed read per
          query (cached on SQLite behind ``PRAGMA data_version``).
* notify: the writer sends ``NOTIFY`` in its transaction and replicas ``LISTEN``; a query
          trusts what the notifications said. No read per query, but a notification is
          delivered to the listener asynchronously after the commit returns, so a query
          sent right after "task completed" may run before it arrives.

Measured here, in one run, on 300 documents of the shared corpus (one namespace):
(a) the per-query read, (b) a whole in-process query (embed + search) as the baseline
it is compared with, (c) replaying one changed document into the index, and on
PostgreSQL (d) how long a notification takes to arrive after its commit returned, and
how often it had not arrived yet when the writer's commit returned — the share of
"next queries" that a notify-only replica would answer without the new document.

    .venv/bin/python bench/bench_catchup.py [--documents 300] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from _reach_service import add_engine_arguments, postgres_database
from _stats import latency_stats, timed_samples

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.query.index import CancelToken
from reachstore_server.query.indexes import IndexManager, Slot
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.records import ChunkData
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.schema import migrate_to_head

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "bench" / "corpus-10k.jsonl"
QUERIES = Path(__file__).resolve().parents[2] / "shared" / "bench" / "queries-10k.jsonl"
TENANT = "default"
NAMESPACE = "sysdocs"


def _lines(path: Path, count: int, namespace: str) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["namespace"] == namespace:
                out.append(row)
                if len(out) == count:
                    break
    return out


def _timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    return latency_stats(timed_samples(fn, n, warm_up=0))


class Replica:
    """A store, its index manager and the namespace's slot, as one query replica holds
    them."""

    def __init__(self, url: str, embedder: UsemEmbedder, folder: Path) -> None:
        engine = make_engine(url)
        migrate_to_head(engine)
        self.store = SemanticStore(make_sessions(engine))
        self.embedder = embedder
        self.info = self.store.create_namespace(
            TENANT, NAMESPACE, embedder.model_id, embedder.dimension
        )
        self.manager = IndexManager(self.store, folder)
        self.added = 0

    def add(self, rows: list[dict[str, Any]]) -> None:
        vectors = self.embedder.embed([r["text"] for r in rows])
        with self.store.begin() as session:
            for row, vector in zip(rows, vectors, strict=True):
                digest = hashlib.sha256(row["text"].encode()).hexdigest()
                self.store.commit_document(
                    session,
                    TENANT,
                    self.info.id,
                    f"{row['id']}-{self.added}",
                    row["text"],
                    {},
                    digest,
                    [ChunkData(row["text"], digest, vector.tobytes())],
                )
                self.added += 1

    def slot(self) -> Slot:
        slot = self.manager.slot(TENANT, self.info)
        if not slot.ready.wait(300):
            raise RuntimeError("the index did not load")
        return slot

    def head_seq(self) -> int:
        return self.store.namespace_heads(TENANT, [NAMESPACE])[NAMESPACE].change_seq


def measure_engine(url: str, rows: list[dict[str, Any]], queries: list[str]) -> dict[str, Any]:
    embedder = UsemEmbedder()
    with tempfile.TemporaryDirectory() as folder:
        replica = Replica(url, embedder, Path(folder))
        replica.add(rows)
        slot = replica.slot()
        replica.manager.catch_up(slot, replica.head_seq(), CancelToken())

        read = _timed(lambda: replica.store.namespace_heads(TENANT, [NAMESPACE]), 2000)

        texts = iter(queries * 10)

        def query() -> None:
            text = next(texts)
            vector = embedder.embed([text])[0]
            replica.manager.search(slot, vector, text, 10, None, CancelToken())

        whole = _timed(query, len(queries))

        extra = iter(rows * 10)
        replay_samples = []
        for _ in range(100):
            replica.add([next(extra)])
            head = replica.head_seq()
            started = time.perf_counter()
            replica.manager.catch_up(slot, head, CancelToken())
            replay_samples.append(time.perf_counter() - started)
        return {"read": read, "query": whole, "replay": latency_stats(replay_samples)}


def measure_notify(url: str, count: int) -> dict[str, Any]:
    """Commits ``count`` transactions that each send a NOTIFY, and times when a listening
    connection receives each one, counting those not yet received when the commit
    returned."""
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    received: dict[int, float] = {}
    ready = threading.Event()
    stop = threading.Event()

    def listen() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("LISTEN reachstore_bench")
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=0.2):
                    received[int(note.payload)] = time.perf_counter()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    ready.wait(10)
    committed: dict[int, float] = {}
    late = 0
    with psycopg.connect(dsn) as conn:
        for n in range(count):
            conn.execute("SELECT pg_notify('reachstore_bench', %s)", (str(n),))
            conn.commit()
            committed[n] = time.perf_counter()
            if n not in received:
                late += 1
            time.sleep(0.002)
    deadline = time.monotonic() + 10
    while len(received) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    listener.join(5)
    delays = [received[n] - committed[n] for n in committed if n in received]
    return {
        "delay": latency_stats([max(d, 0.0) for d in delays]),
        "late_share": late / count,
        "lost": count - len(delays),
    }


def _ms(stats: dict[str, float], key: str) -> str:
    return f"{stats[key]:.3f}"


def report(engine: str, r: dict[str, Any]) -> None:
    read, query, replay = r["read"], r["query"], r["replay"]
    print(f"\n{engine}")
    print(f"  {'':34} {'p50 ms':>8} {'p99 ms':>8}")
    for label, stats in (
        ("(a) per-query change-seq read", read),
        ("(b) whole query (embed + search)", query),
        ("(c) replay one changed document", replay),
    ):
        print(f"  {label:34} {_ms(stats, 'p50_ms'):>8} {_ms(stats, 'p99_ms'):>8}")
    print(
        f"  read / query (p50): {read['p50_ms'] / query['p50_ms']:.3f}"
        f"   replay / query (p50): {replay['p50_ms'] / query['p50_ms']:.3f}"
    )
    if "notify" in r:
        note = r["notify"]
        print(
            f"  (d) NOTIFY arrival after commit: p50 {_ms(note['delay'], 'p50_ms')} ms, "
            f"p99 {_ms(note['delay'], 'p99_ms')} ms; not yet arrived when the commit "
            f"returned: {note['late_share']:.1%}; never arrived: {note['lost']}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--notifications", type=int, default=1000)
    add_engine_arguments(parser, "query")
    args = parser.parse_args(argv)
    rows = _lines(CORPUS, args.documents, NAMESPACE)
    queries = [q["text"] for q in _lines(QUERIES, 200, NAMESPACE)]
    print(f"{len(rows)} documents of {NAMESPACE}, {len(queries)} queries")
    with tempfile.TemporaryDirectory() as folder:
        report("SQLite", measure_engine(f"sqlite:///{folder}/bench.db", rows, queries))
    if not args.skip_postgres:
        with postgres_database(args.postgres_url) as (url, version):
            result = measure_engine(url, rows, queries)
            result["notify"] = measure_notify(url, args.notifications)
            report(f"PostgreSQL {version}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
