"""Two query replicas behind the bridge: calls are balanced over both, and when one is
killed with SIGKILL in the middle of a steady load no request fails — the bridge's
channel skips the dead replica and sends a read it had in flight again to the other."""

from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from reachstore.ingest.v1 import ingest_service_pb2 as ingest_pb
from reachstore.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from tests.e2e.processes import ROOT, ServiceProcess
from tests.e2e.system import free_port_block

pytestmark = pytest.mark.e2e

SECRETS = {"REACHSTORE_PII_SECRET": "replica-tests-pii-secret"}


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, "the bridge exited at start"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.1)


def test_killing_a_query_replica_fails_no_request(tmp_path: Path) -> None:
    common = {
        **SECRETS,
        "REACHSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'reachstore.db'}",
        "REACHSTORE_DATA_DIR": str(tmp_path / "data"),
    }
    ingest = ServiceProcess(
        "reachstore_server.ingest.main",
        "reachstore.ingest.v1.IngestService",
        tmp_path,
        "ingest",
        common,
    ).start()
    replicas = [
        ServiceProcess(
            "reachstore_server.query.main",
            "reachstore.query.v1.QueryService",
            tmp_path,
            f"query-{i}",
            {**common, "REACHSTORE_DATA_DIR": str(tmp_path / f"data-{i}")},
        ).start()
        for i in range(2)
    ]
    bridge_port = free_port_block(1)
    log = (tmp_path / "bridge.log").open("wb")
    bridge = subprocess.Popen(
        [sys.executable, "-m", "reachstore_server.bridge.main"],
        cwd=ROOT,
        env={
            **ServiceProcess.base_env(),
            **common,
            "REACHSTORE_LISTEN": f"127.0.0.1:{bridge_port}",
            "REACHSTORE_QUERY_ADDR": ",".join(r.address for r in replicas),
            "REACHSTORE_INGEST_ADDR": ingest.address,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        stub = ingest_grpc.IngestServiceStub(ingest.channel)
        stub.CreateNamespace(ingest_pb.CreateNamespaceRequest(name="docs"), timeout=10)
        task = stub.CreateDocument(
            ingest_pb.CreateDocumentRequest(
                namespace="docs",
                document=ingest_pb.DocumentInput(
                    document_id="tea", text="Green tea is steamed soon after picking."
                ),
            ),
            timeout=10,
        ).task
        deadline = time.monotonic() + 30
        while task.state != ingest_pb.TASK_STATE_COMPLETED:
            assert time.monotonic() < deadline, task
            time.sleep(0.1)
            task = stub.GetTask(ingest_pb.GetTaskRequest(task_id=task.task_id), timeout=10).task
        url = f"http://127.0.0.1:{bridge_port}"
        _wait_http(f"{url}/healthz", bridge)
        stop = threading.Event()

        def load() -> None:
            with httpx.Client(base_url=url, timeout=30) as http:
                while not stop.is_set():
                    reply = http.post(
                        "/api/v1/query", json={"namespaces": ["docs"], "query": "green tea"}
                    )
                    ok = reply.status_code == 200 and reply.json()["meta"]["coverage_ratio"] == 1
                    outcomes["ok" if ok else f"failed {reply.status_code}"] += 1

        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        time.sleep(1.5)
        before_kill = sum(outcomes.values())
        replicas[0].kill()
        time.sleep(2.5)
        stop.set()
        for worker in workers:
            worker.join(30)
        summary = (
            f"2 query replicas, 4 clients: {before_kill} requests before the kill, "
            f"{sum(outcomes.values())} in all; outcomes {dict(outcomes)}"
        )
        print(summary)
        assert outcomes["ok"] > before_kill > 0, summary
        assert set(outcomes) == {"ok"}, summary
    finally:
        bridge.terminate()
        bridge.wait(20)
        log.close()
        for process in (*replicas, ingest):
            process.stop()
