"""Memory of a sharded query tier (docs/SHARDS.md): RSS and PSS of each query process with
1, 2 and 4 members holding the shared corpus, against one unsharded process holding all of
it, measured in the same run.

Run from the repository root (about 5 minutes on 2 cores, most of it the ingest):

    .venv/bin/python bench/bench_shards.py [--corpus ../shared/bench/corpus-10k.jsonl]

A private database (``reachstore_bench_shards_<hex>`` on ``--postgres-url``, dropped at
the end) gets the corpus as shipped, one document per chunk, through the ingest service's
BatchCreateDocuments. Then for each tier size the members start with
``REACHSTORE_QUERY_ADVERTISE``, settle (every member serving, namespaces no longer placed
on a member dropped after three leases), answer one query over every namespace, and each
member's RSS, PSS and the namespaces it holds are read. A member's memory is its own
interpreter, model and libraries (what the unsharded process with an empty database
holds, measured too) plus its share of the indexes.

``--one-namespace --partition-chunks N`` puts the whole corpus in one namespace, which
the members split into partitions of at most N chunks (docs/SHARDS.md, "Partitions"): the
tiers are measured as they settle after the split, and again with members started once
the namespace is split and restarted in turn (``*_restarted``), which load only the
partitions placed on them.

``--latency N`` times N of the shared queries (``--queries``), one at a time, through the
tier's first member, top_k 10, embedding included, once the tier has settled: p50 and p99
of each tier and its p50 against the unsharded process's in the same run. Over a split
namespace a query with words makes two rounds (the partitions' BM25 statistics, then the
searches), so this is what partitions cost a query.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _memory import pss_mib, rss_mib  # noqa: E402

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb  # noqa: E402
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc  # noqa: E402
from reachstore.query.v1 import query_service_pb2 as pb  # noqa: E402
from reachstore.query.v1 import query_service_pb2_grpc as pb_grpc  # noqa: E402
from tests.e2e.processes import ServiceProcess  # noqa: E402

LEASE_S = 2
BATCH = 100
ONE_NAMESPACE = "corpus"  # --one-namespace: every chunk in it


def _split(url: str) -> bool:
    """Whether no namespace is in the middle of a split (docs/SHARDS.md, "Partitions")."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT partitions, partitions_next FROM namespaces").fetchall()
    return all(routed == loading for routed, loading in rows)


def _ingest(
    corpus: Path, env: dict[str, str], work: Path, one_namespace: bool
) -> tuple[int, list[str]]:
    rows = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    by_ns: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_ns[ONE_NAMESPACE if one_namespace else row["namespace"]].append(row)
    ingest = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        work,
        "ingest",
        {**env, "REACHSTORE_DATA_DIR": str(work / "ingest")},
    ).start()
    try:
        stub = ingest_grpc.IngestServiceStub(ingest.channel)
        tasks: list[str] = []
        for name, docs in by_ns.items():
            stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name=name), timeout=30)
            for start in range(0, len(docs), BATCH):
                reply = stub.BatchCreateDocuments(
                    ingest_pb.BatchCreateDocumentsRequest(
                        namespace=name,
                        documents=[
                            ingest_pb.DocumentInput(document_id=d["id"], text=d["text"])
                            for d in docs[start : start + BATCH]
                        ],
                        on_duplicate=ingest_pb.ON_DUPLICATE_OVERWRITE,
                    ),
                    timeout=60,
                )
                tasks.extend(r.task_id for r in reply.results if r.task_id)
        started = time.monotonic()
        for task_id in tasks:
            while True:
                state = stub.GetTask(
                    ingest_pb.GetTaskRequest(task_id=task_id), timeout=30
                ).task.state
                if state in (ingest_pb.TASK_STATE_COMPLETED, ingest_pb.TASK_STATE_FAILED):
                    break
                time.sleep(0.5)
        print(f"ingested {len(rows)} chunks in {time.monotonic() - started:.0f} s", flush=True)
    finally:
        ingest.stop()
    return len(rows), sorted(by_ns)


def _stored(env: dict[str, str]) -> tuple[int, list[str]]:
    """The chunks and namespaces a kept database holds."""
    url = env["REACHSTORE_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        (chunks,) = conn.execute("SELECT count(*) FROM chunks").fetchone() or (0,)
        names = [n for (n,) in conn.execute("SELECT name FROM namespaces ORDER BY name")]
    return int(chunks), names


def _members(url: str, count: int) -> int:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT state FROM query_members").fetchall()
    return sum(1 for (state,) in rows if state == "serving") if len(rows) == count else -1


def _held(member: ServiceProcess) -> list[str]:
    reply = pb_grpc.QueryServiceStub(member.channel).ListNamespaceHealth(
        pb.ListNamespaceHealthRequest(page_size=100), timeout=30
    )
    return sorted(n.name for n in reply.namespaces if n.index_state == "ready")


def _latency(member: ServiceProcess, names: list[str], queries: list[str]) -> dict[str, float]:
    """p50 and p99 (ms) of ``queries`` through ``member``, one at a time, after a warm-up."""
    stub = pb_grpc.QueryServiceStub(member.channel)
    took = []
    for i, text in enumerate([*queries[:20], *queries]):
        started = time.perf_counter()
        reply = stub.Query(pb.QueryRequest(namespaces=names, query=text, top_k=10), timeout=30)
        if i >= 20:
            took.append((time.perf_counter() - started) * 1000)
        assert reply.meta.coverage_ratio == 1.0, reply.meta
    cuts = statistics.quantiles(took, n=100)
    return {"p50_ms": round(statistics.median(took), 2), "p99_ms": round(cuts[98], 2)}


def _tier(
    count: int,
    env: dict[str, str],
    work: Path,
    names: list[str],
    sharded: bool,
    restart: bool = False,
    queries: list[str] | None = None,
) -> list[dict[str, object]]:
    """The members' memory once settled. ``restart``: each member is then restarted in
    turn (as a rolling restart does), so that it loads only what is placed on it; before,
    a member that held a namespace whole until it was split keeps part of that memory."""
    members = []
    for i in range(count):
        name = f"{'member' if sharded else 'whole'}-{count}-{i}"
        extra = {"REACHSTORE_DATA_DIR": str(work / name)}
        member = ServiceProcess(
            "reachstore_server.query.main",
            "reachstore.query.v1.QueryService",
            work,
            name,
            {**env, **extra},
        )
        if sharded:
            member._env["REACHSTORE_QUERY_ADVERTISE"] = member.address
        members.append(member.start(timeout=300))
    try:
        url = env["REACHSTORE_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
        deadline = time.monotonic() + 600
        while sharded and _members(url, count) != count:
            assert time.monotonic() < deadline, "members did not settle"
            time.sleep(0.5)
        if sharded:
            # A namespace larger than a partition is split once a member holds it whole.
            time.sleep(LEASE_S * 2)
            while not _split(url):
                assert time.monotonic() < deadline, "the split did not settle"
                time.sleep(0.5)
            time.sleep(LEASE_S * 4)  # drops happen three leases after a namespace moves
        for member in members if names else []:
            # Until every index is loaded a namespace answers INDEX_REBUILDING (transient).
            while True:
                reply = pb_grpc.QueryServiceStub(member.channel).Query(
                    pb.QueryRequest(namespaces=names, query="list files in a directory", top_k=10),
                    timeout=120,
                )
                if reply.meta.coverage_ratio == 1.0:
                    break
                rebuilding = {f.error_code for f in reply.meta.namespaces_failed}
                assert rebuilding == {"INDEX_REBUILDING"}, reply.meta
                assert time.monotonic() < deadline, "indexes did not load"
                time.sleep(1)
        if restart:
            for member in members:
                member.stop()
                member.start(timeout=300)
                while _members(url, count) != count:
                    assert time.monotonic() < deadline, "members did not settle"
                    time.sleep(0.5)
            time.sleep(LEASE_S * 4)
        out: list[dict[str, object]] = []
        if queries and names:
            out.append({"latency": _latency(members[0], names, queries)})
        for member in members:
            assert member.process is not None
            pid = member.process.pid
            out.append(
                {
                    "member": member.name,
                    "rss_mib": round(rss_mib(pid), 1),
                    "pss_mib": round(pss_mib(pid), 1),
                    "holds": _held(member),
                    # What it holds on disk: a namespace whole, or its partitions.
                    "index_files": sorted(
                        f.name for f in (work / member.name / "indexes").glob("*.snap")
                    ),
                }
            )
        return out
    finally:
        for member in members:
            member.stop()


def _p50(tier: object) -> float | None:
    """The p50 a tier's first entry reports, if it was timed (``--latency``)."""
    if isinstance(tier, list) and tier and isinstance(tier[0], dict) and "latency" in tier[0]:
        return float(tier[0]["latency"]["p50_ms"])
    return None


def _partition_counts(env: dict[str, str]) -> dict[str, int]:
    url = env["REACHSTORE_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT name, partitions FROM namespaces").fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--corpus", type=Path, default=ROOT.parent / "shared/bench/corpus-10k.jsonl"
    )
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sizes", default="1,2,4")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--keep", action="store_true", help="keep the database, to measure it again with --reuse"
    )
    parser.add_argument("--reuse", help="a database kept by an earlier --keep run: no ingest")
    parser.add_argument(
        "--one-namespace",
        action="store_true",
        help=f"every chunk in one namespace, {ONE_NAMESPACE!r}",
    )
    parser.add_argument("--latency", type=int, default=0, help="queries timed per tier")
    parser.add_argument(
        "--queries", type=Path, default=ROOT.parent / "shared/bench/queries-10k.jsonl"
    )
    parser.add_argument(
        "--partition-chunks",
        type=int,
        help="REACHSTORE_QUERY_PARTITION_CHUNKS of the members (default: the service's)",
    )
    args = parser.parse_args()
    db = args.reuse or f"reachstore_bench_shards_{uuid.uuid4().hex[:8]}"
    if not args.reuse:
        with psycopg.connect(args.postgres_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
    base = args.postgres_url.rsplit("/", 1)[0]
    env = {
        "REACHSTORE_DATABASE_URL": f"{base.replace('postgresql://', 'postgresql+psycopg://')}/{db}",
        "REACHSTORE_PII_SECRET": "bench-shards-pii-secret",
        "REACHSTORE_QUERY_MEMBER_LEASE_S": str(LEASE_S),
        "REACHSTORE_QUERY_HOP_SECRET": "bench-shards-hop-secret-32-characters",
        "REACHSTORE_LOG_LEVEL": "WARNING",
    }
    if args.partition_chunks:
        env["REACHSTORE_QUERY_PARTITION_CHUNKS"] = str(args.partition_chunks)
    report: dict[str, object] = {}
    queries = [
        json.loads(line)["text"] for line in args.queries.read_text().splitlines() if line.strip()
    ][: args.latency]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
            work = Path(tmp)
            # The process alone: interpreter, model and libraries, no index.
            report["empty_process"] = _tier(1, env, work, [], sharded=False)
            if args.reuse:
                chunks, names = _stored(env)
            else:
                chunks, names = _ingest(args.corpus, env, work, args.one_namespace)
            report["chunks"] = chunks
            report["unsharded"] = _tier(1, env, work, names, sharded=False, queries=queries)
            for size in (int(s) for s in args.sizes.split(",")):
                report[f"sharded_{size}"] = _tier(
                    size, env, work, names, sharded=True, queries=queries
                )
            if args.partition_chunks:
                report["partitions"] = _partition_counts(env)
                for size in (int(s) for s in args.sizes.split(",")):
                    report[f"sharded_{size}_restarted"] = _tier(
                        size, env, work, names, sharded=True, restart=True, queries=queries
                    )
    finally:
        if args.keep or args.reuse:
            print(f"database kept: {db}", flush=True)
        else:
            with psycopg.connect(args.postgres_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    base_p50 = _p50(report.get("unsharded"))
    for key, tier in report.items():
        if base_p50 and (p50 := _p50(tier)):
            print(f"{key}: query p50 {p50:.2f} ms = {p50 / base_p50:.2f}x the unsharded process")
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
