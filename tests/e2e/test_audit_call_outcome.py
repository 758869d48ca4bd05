"""A call that fails after its first write: the trail says how it really ended.

Deleting a namespace commits the deletion, then removes the namespace's ingest tasks in a
second transaction. A trigger the test puts on the database makes that second write fail
(as a lost connection or a bug could), from outside the process. The caller gets an
INTERNAL error that does not tell it to retry; the trail keeps the committed change's
event and, after it, the call's real status and whole duration.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.postgres

KEEP_TASKS = """
CREATE FUNCTION keep_doomed_tasks() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'the tasks of doomed are kept'; END $$;
CREATE TRIGGER keep_doomed_tasks BEFORE DELETE ON ingest_tasks FOR EACH ROW
WHEN (OLD.namespace = 'doomed') EXECUTE FUNCTION keep_doomed_tasks();
"""


def _events(http: httpx.Client, trace: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        reply = http.get("/api/v1/audit/events", params={"trace_id": trace})
        assert reply.status_code == 200, reply.text
        events = reply.json()["events"]
        if len(events) >= count or time.monotonic() > deadline:
            return list(events)
        time.sleep(0.25)


def test_a_call_that_fails_after_its_first_write_is_audited_with_its_real_end(
    pg_database: str, tmp_path: Path
) -> None:
    system = RunningSystem(tmp_path, extra_args=("--database-url", pg_database))
    system.start()
    try:
        with httpx.Client(base_url=system.http_url, timeout=30) as http:
            assert http.post("/api/v1/namespaces", json={"name": "doomed"}).status_code == 200
            made = http.post(
                "/api/v1/namespaces/doomed/documents",
                json={"document": {"document_id": "d", "text": "a task row to keep"}},
            )
            assert made.status_code == 202, made.text
            with psycopg.connect(pg_database.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute(KEEP_TASKS)
            trace = uuid.uuid4().hex
            reply = http.delete(
                "/api/v1/namespaces/doomed",
                headers={"traceparent": f"00-{trace}-b7ad6b7169203331-01"},
            )
            assert reply.status_code == 500, reply.text
            error = reply.json()["error"]
            # An unexpected error is not advertised as safely retryable.
            assert (error["code"], error["category"], error["retryable"]) == (
                "INTERNAL",
                "permanent",
                False,
            ), error
            assert error["retry_after_ms"] is None and "retry-after" not in reply.headers
            # The first write did commit.
            assert http.get("/api/v1/namespaces/doomed").status_code == 404
            events = _events(http, trace, 2)
        summary = [(e["method"], e["result_status"], e["duration_ms"]) for e in events]
        assert [e["method"] for e in events] == ["DeleteNamespace", "DeleteNamespace"], summary
        committed, ended = events
        assert committed["result_status"] == "ok", summary
        assert (ended["result_status"], ended["error_code"], ended["category"]) == (
            "INTERNAL",
            "INTERNAL",
            "permanent",
        ), summary
        assert ended["params"] == {"outcome_of": committed["event_id"]}, ended
        assert ended["duration_ms"] >= committed["duration_ms"], summary
        assert ended["seq"] > committed["seq"]
    finally:
        assert system.stop() == 0, "".join(system.output[-40:])
