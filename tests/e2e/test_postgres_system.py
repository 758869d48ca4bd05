"""The whole system on PostgreSQL instead of SQLite: same behaviour, same answers."""

from __future__ import annotations

from pathlib import Path

import httpx

import reachstore
from tests.e2e.conftest import ingest, wait_task
from tests.e2e.system import RunningSystem


def test_the_system_runs_on_postgresql(tmp_path: Path, pg_database: str) -> None:
    system = RunningSystem(tmp_path, extra_args=("--database-url", pg_database))
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            ingest(
                http,
                "pg-docs",
                [
                    {
                        "document_id": "tea",
                        "text": "Green tea is steamed or pan-fired soon after picking.",
                    },
                    {"document_id": "coffee", "text": "Coffee beans are roasted before brewing."},
                ],
            )
            body = http.post(
                "/api/v1/query",
                json={
                    "namespaces": ["pg-docs", "nope"],
                    "query": "how is green tea made",
                    "top_k": 1,
                },
            ).json()
            assert body["meta"]["coverage_ratio"] == 0.5
            assert body["results"][0]["document_id"] == "tea"
            reply = http.post(
                "/api/v1/namespaces/pg-docs/documents",
                json={"document": {"document_id": "tea", "text": "dup"}},
            )
            assert (
                wait_task(http, reply.json()["task"]["task_id"])["error"]["error_code"]
                == "DOCUMENT_EXISTS"
            )
            # PostgreSQL's text cannot hold NUL: refused up front, naming the field; in a
            # batch only the document holding it fails, and the valid one is stored.
            reply = http.post(
                "/api/v1/namespaces/pg-docs/documents",
                json={"document": {"document_id": "nul", "text": "before\u0000after"}},
            )
            assert reply.status_code == 400, reply.text
            assert "document.text" in reply.json()["error"]["message"]
            reply = http.post(
                "/api/v1/namespaces/pg-docs/documents:batchCreate",
                json={
                    "documents": [
                        {"document_id": "fine", "text": "A valid document."},
                        {"document_id": "nul", "text": "\u0000"},
                    ]
                },
            )
            assert reply.status_code == 200, reply.text
            [failure] = reply.json()["meta"]["failed"]
            assert failure["structured_data"]["field"] == "documents[1].text", failure
            fine = reply.json()["results"][0]
            assert fine["outcome"] == "accepted", fine
            assert wait_task(http, fine["task_id"])["state"] == "completed"
        with reachstore.Client(system.query_addr, system.ingest_addr) as client:
            assert client.get_namespace("pg-docs").document_count == 3
            assert client.search(["demo"], "semantic storage").results
    finally:
        assert system.stop() == 0
