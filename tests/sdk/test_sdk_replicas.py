"""The SDK over several replicas of a service: one address list, calls balanced over the
replicas, and a read that a killed replica did not answer repeated on the other one."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import httpx
import pytest

import reachstore
from reachstore._transport_grpc import channel_target
from tests.e2e.processes import ServiceProcess

pytestmark = pytest.mark.e2e


def test_an_address_list_is_one_balanced_target() -> None:
    assert channel_target("127.0.0.1:1") == "127.0.0.1:1"
    assert channel_target("query.internal:50051") == "query.internal:50051"
    assert channel_target("10.0.0.1:1, 10.0.0.2:1") == "ipv4:10.0.0.1:1,10.0.0.2:1"
    assert channel_target("[::1]:1,[::1]:2") == "ipv6:[::1]:1,[::1]:2"


def test_killing_a_query_replica_fails_no_sdk_call(tmp_path: Path) -> None:
    common = {
        "REACHSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'reachstore.db'}",
        "REACHSTORE_PII_SECRET": "sdk-replica-tests-pii-secret",
    }
    ingest = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        tmp_path,
        "ingest",
        {**common, "REACHSTORE_DATA_DIR": str(tmp_path / "ingest")},
    ).start()
    metrics = [ServiceProcess.free_port() for _ in range(2)]
    replicas = [
        ServiceProcess(
            "reachstore_server.query.main",
            "reachstore.query.v1.QueryService",
            tmp_path,
            f"query-{i}",
            {
                **common,
                "REACHSTORE_DATA_DIR": str(tmp_path / f"query-{i}"),
                "REACHSTORE_METRICS_LISTEN": f"127.0.0.1:{metrics[i]}",
            },
        ).start()
        for i in range(2)
    ]

    def answered(i: int) -> float:
        text = httpx.get(f"http://127.0.0.1:{metrics[i]}/metrics", timeout=5).text
        line = next(x for x in text.splitlines() if x.startswith("reachstore_queries_total "))
        return float(line.split()[1])

    outcomes: collections.Counter[str] = collections.Counter()
    try:
        addresses = ",".join(r.address for r in replicas)
        with reachstore.Client(addresses, ingest.address) as client:
            client.create_namespace("docs")
            task = client.add_document(
                "docs", "Green tea is steamed soon after picking.", document_id="tea"
            )
            client.wait_for_task(task.task_id, timeout=30)
            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    try:
                        answer = client.search(["docs"], "green tea")
                    except reachstore.ReachstoreError as exc:
                        outcomes[f"failed {exc.code}"] += 1
                    else:
                        outcomes["ok" if answer.meta.complete else "partial"] += 1

            workers = [threading.Thread(target=load) for _ in range(3)]
            for worker in workers:
                worker.start()
            deadline = time.monotonic() + 30
            while outcomes["ok"] < 30 and time.monotonic() < deadline:
                time.sleep(0.05)
            before = outcomes["ok"]
            shares = [answered(0), answered(1)]
            replicas[0].kill()
            time.sleep(2.5)
            stop.set()
            for worker in workers:
                worker.join(30)
        summary = (
            f"SDK over 2 query replicas, 3 threads; replica 0 killed after {before} answers: "
            f"{dict(outcomes)}; answered by each replica before the kill: {shares}"
        )
        print(summary)
        assert outcomes["ok"] > before >= 30, summary
        assert min(shares) >= 0.25 * sum(shares), summary  # balanced, not all on one
        assert set(outcomes) == {"ok"}, summary
    finally:
        for process in (*replicas, ingest):
            process.stop()
