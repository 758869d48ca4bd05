"""The embedder on every core: copies of the ingest process, forked once the model is
loaded, each embedding its share of a batch.

Why processes: the embedder's tokenizer is pure Python and holds the interpreter lock, so
threads cannot run two embeddings at once, and ingest is mostly embedding
(``docs/CAPACITY.md``). Why fork, and only at start: a forked copy shares the loaded model
with its parent (no second load of the weights, pages shared until written), but forking
a process that already runs threads (gRPC's, the audit shipper's) is unsafe. So
``ForkedEmbedders.start`` runs before any thread starts, and a copy that dies later is
not replaced: embedding goes on in the ingest process itself, logged, at one core's rate.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from services.common.cores import usable_cores
from services.embedding.embedder import Embedder

log = logging.getLogger(__name__)

# Below this many texts per copy, sending the work costs more than it saves.
MIN_TEXTS_PER_COPY = 4


def _serve(conn: Connection, embedder: Embedder, parent_ends: list[Connection]) -> None:
    """A copy's loop: texts in, vectors out, until the parent's end closes. The parent's
    ends of every pipe forked so far, this one's included, are closed here first: a copy
    holding one would keep that pipe open after the parent died, and wait on it forever."""
    for end in parent_ends:
        end.close()
    while True:
        try:
            texts = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return  # the parent is gone or stopping
        conn.send(embedder.embed(texts))


class ForkedEmbedders:
    """An ``Embedder`` that splits each call across forked copies of ``embedder``."""

    def __init__(self, embedder: Embedder, copies: list[tuple[BaseProcess, Connection]]) -> None:
        self._embedder = embedder
        self._copies = copies
        self._lock = threading.Lock()

    @classmethod
    def start(cls, embedder: Embedder, processes: int) -> Embedder:
        """``embedder`` itself when one process is asked for; otherwise ``processes``
        forked copies of it. Call before this process starts any thread."""
        if processes < 2:
            return embedder
        if threading.active_count() != 1:
            raise RuntimeError("the embedder's copies must be forked before any thread starts")
        context = multiprocessing.get_context("fork")
        copies: list[tuple[BaseProcess, Connection]] = []
        for n in range(processes):
            parent_end, child_end = context.Pipe()
            parent_ends = [end for _, end in copies] + [parent_end]
            process = context.Process(
                target=_serve,
                args=(child_end, embedder, parent_ends),
                name=f"embedder-{n}",
                daemon=True,
            )
            process.start()
            child_end.close()
            copies.append((process, parent_end))
        log.info("embedding in %d processes: %s", processes, [p.pid for p, _ in copies])
        return cls(embedder, copies)

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    @property
    def pids(self) -> list[int]:
        return [process.pid for process, _ in self._copies if process.pid is not None]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            count = min(len(self._copies), len(texts) // MIN_TEXTS_PER_COPY)
            if count < 2:
                return self._embedder.embed(texts)
            size = -(-len(texts) // count)
            parts = [list(texts[i : i + size]) for i in range(0, len(texts), size)]
            try:
                for (_, conn), part in zip(self._copies, parts, strict=False):
                    conn.send(part)
                vectors = [conn.recv() for (_, conn), _ in zip(self._copies, parts, strict=False)]
            except (EOFError, OSError) as exc:
                self._lose_copies(exc)
                return self._embedder.embed(texts)
            return np.concatenate(vectors)

    def _lose_copies(self, exc: BaseException) -> None:
        """A copy died (killed, out of memory): the others may hold half-answered work, so
        every copy goes, and this process embeds from now on."""
        log.error(
            "an embedding process ended (%s: %s); embedding in the ingest process from now on",
            type(exc).__name__,
            exc,
        )
        for process, conn in self._copies:
            conn.close()
            process.kill()
            process.join(timeout=5)  # reaped, not left a zombie
        self._copies = []

    def close(self) -> None:
        for process, conn in self._copies:
            conn.close()
            process.join(timeout=5)
        self._copies = []


def processes_wanted(setting: int) -> int:
    """``REACHSTORE_INGEST_EMBED_PROCESSES``: 0 means one per core this process may use
    (``services/common/cores.py``: its CPU quota counts)."""
    return setting if setting > 0 else usable_cores()
