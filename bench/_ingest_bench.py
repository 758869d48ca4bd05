"""(a) Ingest: the corpus end to end over REST, then the same chunks through the raw
embedder in this process, which bounds what the ingest service can reach."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from _stats import Pids, cpu_seconds
from sqlalchemy import func, select

from reachstore_server.embedding import UsemEmbedder
from reachstore_server.ingest.domain.chunking import chunk_text
from reachstore_server.storage.models import TaskRow
from reachstore_server.storage.repository import SemanticStore
from reachstore_server.storage.tasks import FINISHED

TENANT = "default"
BATCH_SIZE = 100  # the most documents one REST batchCreate takes


def _batch_bodies(
    names: Sequence[str], docs: Mapping[str, list[dict[str, Any]]]
) -> list[tuple[str, list[dict[str, Any]], bytes]]:
    """(namespace, documents, JSON body) per batch, the namespaces interleaved batch by
    batch, encoded before the clock starts."""
    out = []
    for start in range(0, max(len(v) for v in docs.values()), BATCH_SIZE):
        for name in names:
            part = docs[name][start : start + BATCH_SIZE]
            if part:
                documents = [
                    {"document_id": d["id"], "text": d["text"], "metadata": {}} for d in part
                ]
                body = {"documents": documents, "on_duplicate": "overwrite"}
                out.append((name, part, json.dumps(body).encode()))
    return out


def _open_task_ids(store: SemanticStore, names: Sequence[str]) -> list[str]:
    with store.session() as session:
        return list(
            session.scalars(
                select(TaskRow.task_id)
                .where(TaskRow.tenant == TENANT, TaskRow.namespace.in_(names))
                .where(TaskRow.state.not_in(FINISHED))
                .order_by(TaskRow.created_at, TaskRow.task_id)
            )
        )


def _task_summary(
    store: SemanticStore, names: Sequence[str]
) -> tuple[dict[str, int], dt.datetime | None]:
    """Task count by state, and when the last task changed (the server's clock)."""
    mine = (TaskRow.tenant == TENANT, TaskRow.namespace.in_(names))
    with store.session() as session:
        states = session.execute(
            select(TaskRow.state, func.count()).where(*mine).group_by(TaskRow.state)
        )
        last = session.scalar(select(func.max(TaskRow.updated_at)).where(*mine))
        return {state: int(n) for state, n in states}, last


def ingest(
    http_url: str,
    store: SemanticStore,
    pids: Pids,
    names: Sequence[str],
    docs: Mapping[str, list[dict[str, Any]]],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Creates the namespaces, submits every document over REST as fast as batches are
    accepted and waits until every task is finished: documents/s and chunks/s from the
    first submission to the last completion seen over REST. Also returns the documents in
    the order they were submitted."""
    client = httpx.Client(base_url=http_url, timeout=120.0)
    try:
        for name in names:
            client.post("/api/v1/namespaces", json={"name": name}).raise_for_status()
        batches = _batch_bodies(names, docs)
        headers = {"content-type": "application/json"}

        cpu0 = cpu_seconds(pids)
        wall0 = time.time()
        t0 = time.perf_counter()
        last_of_batch: list[str] = []
        # The corpus ships a real row a store cannot hold (a chunk with NUL characters): a
        # document refused for what it is fails alone and is reported; anything else that
        # is not accepted (a quota, a passing fault) spoils the measurement.
        refused: list[dict[str, Any]] = []
        for name, part, body in batches:
            reply = client.post(
                f"/api/v1/namespaces/{name}/documents:batchCreate", content=body, headers=headers
            )
            reply.raise_for_status()
            answer = reply.json()
            ids = [r["task_id"] for r in answer["results"] if r["outcome"] == "accepted"]
            failed = answer["meta"]["failed"]
            if len(ids) + len(failed) != len(part) or any(
                f["category"] != "permanent" for f in failed
            ):
                raise RuntimeError(f"batchCreate in {name}: not all accepted: {reply.text[:300]}")
            refused += [
                {
                    "namespace": name,
                    "document_id": f["document_id"],
                    "error_code": f["error_code"],
                    "field": f["structured_data"].get("field", ""),
                }
                for f in failed
            ]
            if ids:
                last_of_batch.append(ids[-1])
        submit_seconds = time.perf_counter() - t0

        polls = 0

        def wait_for(task_id: str, pause: float) -> None:
            nonlocal polls
            while True:
                polls += 1
                reply = client.get(f"/api/v1/tasks/{task_id}")
                reply.raise_for_status()
                if reply.json()["task"]["state"] in FINISHED:
                    return
                time.sleep(pause)

        # The worker claims the oldest tasks first, so following the last task of each
        # batch in submission order tracks progress in few requests; the tasks still open
        # after that (claims overlap) are found in the database and waited for one by one.
        for task_id in last_of_batch:
            wait_for(task_id, 0.1)
        while open_ids := _open_task_ids(store, names):
            for task_id in open_ids:
                wait_for(task_id, 0.05)
        seconds = time.perf_counter() - t0
        cpu1 = cpu_seconds(pids)
    finally:
        client.close()

    states, last = _task_summary(store, names)
    left_out = {(r["namespace"], r["document_id"]) for r in refused}
    stored = [
        d for _, part, _ in batches for d in part if (d["namespace"], d["id"]) not in left_out
    ]
    accepted = len(stored)
    if states.get("completed", 0) != accepted:
        raise RuntimeError(f"ingest did not complete cleanly: task states {states}")
    if last is not None and last.tzinfo is None:  # SQLite hands back naive UTC
        last = last.replace(tzinfo=dt.UTC)
    namespaces = [store.get_namespace(TENANT, name) for name in names]
    chunks = sum(info.chunk_count for info in namespaces if info is not None)
    result = {
        "documents": accepted,
        "chunks": chunks,
        "batches": len(batches),
        "batch_size": BATCH_SIZE,
        "seconds": seconds,
        "seconds_server_stamped": last.timestamp() - wall0 if last is not None else None,
        "submit_seconds": submit_seconds,
        "docs_per_s": accepted / seconds,
        "chunks_per_s": chunks / seconds,
        "task_states": states,
        "documents_refused": refused,
        "rest_polls": polls,
        "cpu_seconds": {k: cpu1[k] - cpu0[k] for k in cpu0},
    }
    return result, stored


def raw_embedding(
    embedder: UsemEmbedder, order: Sequence[dict[str, Any]], batch: int
) -> dict[str, Any]:
    """Chunks the documents as the ingest service does and embeds them in calls of
    ``batch`` chunks, like its worker. Also returns the vectors, keyed by (namespace,
    document id, chunk index), to compare with the stored ones."""
    t = time.perf_counter()
    per_doc = [chunk_text(d["text"]) for d in order]
    chunk_seconds = time.perf_counter() - t
    texts = [c for chunks in per_doc for c in chunks]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    parts = [embedder.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
    seconds = time.perf_counter() - t0
    keys = [
        (d["namespace"], d["id"], i)
        for d, chunks in zip(order, per_doc, strict=True)
        for i in range(len(chunks))
    ]
    return {
        "documents": len(order),
        "chunks": len(texts),
        "batch": batch,
        "seconds": seconds,
        "chunking_seconds": chunk_seconds,
        "cpu_seconds": time.process_time() - cpu0,
        "docs_per_s": len(order) / seconds,
        "chunks_per_s": len(texts) / seconds,
        "vectors": dict(zip(keys, np.concatenate(parts), strict=True)),
    }


_POOL_EMBEDDER: UsemEmbedder | None = None


def _load_embedder(threads: int, ready: Any) -> None:
    global _POOL_EMBEDDER
    _POOL_EMBEDDER = UsemEmbedder(threads=threads)
    _POOL_EMBEDDER.embed(["warm-up: loads the model"])
    ready.wait()  # every process loaded before the clock starts


def _embed_batch(texts: list[str]) -> np.ndarray:
    assert _POOL_EMBEDDER is not None
    return _POOL_EMBEDDER.embed(texts)


def raw_embedding_all_cores(
    order: Sequence[dict[str, Any]], batch: int, processes: int, threads: int
) -> dict[str, Any]:
    """The embedder alone on every core: ``processes`` fresh processes, each with its own
    model loaded before the clock starts, embedding the same chunks in calls of ``batch``
    handed out one at a time (the vectors come back to this process, as they must reach
    the store). What the ingest service could reach if it did nothing but embed."""
    texts = [c for d in order for c in chunk_text(d["text"])]
    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(processes + 1)
    with context.Pool(processes, _load_embedder, (threads, ready)) as pool:
        ready.wait()
        t0 = time.perf_counter()
        vectors = pool.map(_embed_batch, batches, chunksize=1)
        seconds = time.perf_counter() - t0
    assert sum(len(v) for v in vectors) == len(texts)
    return {
        "processes": processes,
        "documents": len(order),
        "chunks": len(texts),
        "batch": batch,
        "seconds": seconds,
        "docs_per_s": len(order) / seconds,
        "chunks_per_s": len(texts) / seconds,
    }


def vector_check(
    store: SemanticStore, names: Sequence[str], raw: Mapping[tuple[str, str, int], np.ndarray]
) -> dict[str, Any]:
    """How far the vectors the system stored are from the raw embedder's (same texts,
    chunked the same way): shows both sides did the same work."""
    diffs, stored = [], 0
    for name, info in store.namespace_heads(TENANT, names).items():
        for chunk in store.chunks(TENANT, info.id):
            stored += 1
            vector = raw.get((name, chunk.document_id, chunk.chunk_index))
            if vector is not None:
                diff = np.abs(np.frombuffer(chunk.embedding, dtype=np.float32) - vector)
                diffs.append(float(diff.max()))
    return {
        "compared": len(diffs),
        "max_abs_diff": max(diffs) if diffs else float("nan"),
        "raw_chunks": len(raw),
        "stored_chunks": stored,
    }
