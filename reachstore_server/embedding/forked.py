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

import atexit
import collections
import logging
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from reachstore_server.common.cores import usable_cores
from reachstore_server.embedding.embedder import Embedder

log = logging.getLogger(__name__)

# Below this many texts per copy, sending the work costs more than it saves.
MIN_TEXTS_PER_COPY = 4
# The copies run this much nicer than the services: on a machine they share, a query waiting
# for a core gets it before a document waiting to be embedded (docs/OPERATIONS.md, "Load
# shedding"). Alone on the machine, the copies still get every idle cycle.
EMBED_NICENESS = 10


def _serve(conn: Connection, embedder: Embedder, parent_ends: list[Connection]) -> None:
    """A copy's loop: texts in, vectors out, until the parent's end closes. The parent's
    ends of every pipe forked so far, this one's included, are closed here first: a copy
    holding one would keep that pipe open after the parent died, and wait on it forever."""
    for end in parent_ends:
        end.close()
    os.nice(EMBED_NICENESS)
    while True:
        try:
            texts = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return  # the parent is gone or stopping
        try:
            conn.send(embedder.embed(texts))
        except OSError:
            return  # the parent is gone


class Pending:
    """Vectors being computed: ``result()`` waits for them. A part whose copy died is
    embedded in this process instead, so a result always comes."""

    def __init__(self, parts: list[_Part], fallback: Embedder) -> None:
        self._parts, self._fallback = parts, fallback

    def result(self) -> np.ndarray:
        vectors = []
        for part in self._parts:
            part.done.wait()
            if part.vectors is None:  # its copy ended before answering
                part.vectors = self._fallback.embed(part.texts)
            vectors.append(part.vectors)
        if len(vectors) == 1:
            return vectors[0]
        return np.concatenate(vectors)


class _Part:
    """Texts sent to one copy, and its answer once it came."""

    __slots__ = ("texts", "done", "vectors")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.done = threading.Event()
        self.vectors: np.ndarray | None = None


class _Copy:
    """One forked copy and the two threads that talk to it. The sender hands it its next
    texts while it still embeds the previous ones, so it never waits for this process
    (busy with the store, say) between two parts; the receiver takes its answers in the
    order sent. Two threads, not one: a sender blocked on a full pipe must not keep the
    answers from being read, or neither side would move."""

    def __init__(self, process: BaseProcess, conn: Connection, on_lost: Callable[[], None]):
        self.process, self.conn = process, conn
        self._on_lost = on_lost
        self._to_send: queue.SimpleQueue[_Part | None] = queue.SimpleQueue()
        self._sent: collections.deque[_Part] = collections.deque()
        self._lock = threading.Lock()
        self.queued = 0  # texts given to this copy and not answered yet
        self.lost = False
        name = process.name
        self._threads = [
            threading.Thread(target=self._send, name=f"{name}-send", daemon=True),
            threading.Thread(target=self._receive, name=f"{name}-receive", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def give(self, part: _Part) -> None:
        with self._lock:
            if self.lost:
                part.done.set()  # no vectors: the caller embeds it itself
                return
            self.queued += len(part.texts)
            self._sent.append(part)
        self._to_send.put(part)

    def _send(self) -> None:
        while (part := self._to_send.get()) is not None:
            try:
                self.conn.send(part.texts)
            except (OSError, ValueError):  # the copy is gone; the receiver says so
                return

    def _receive(self) -> None:
        while True:
            try:
                vectors = self.conn.recv()
            except (EOFError, OSError, TypeError, ValueError):
                self._lose()
                return
            with self._lock:
                if not self._sent:
                    return  # closed while idle
                part = self._sent.popleft()
                self.queued -= len(part.texts)
            part.vectors = vectors
            part.done.set()

    def _lose(self) -> None:
        if self._release():
            self._on_lost()

    def _release(self) -> bool:
        """Stops taking work and lets every part waiting on this copy go without vectors
        (their callers embed them); False if that was done already."""
        with self._lock:
            if self.lost:
                return False
            self.lost = True
            waiting, self._sent = list(self._sent), collections.deque()
            self.queued = 0
        for part in waiting:
            part.done.set()
        self._to_send.put(None)
        return True

    def close(self, kill: bool) -> None:
        self._release()
        if kill:
            self.process.kill()  # its end of the pipe closes, so the receiver stops
        self.conn.close()
        self.process.join(timeout=5)  # reaped, not left a zombie


class ForkedEmbedders:
    """An ``Embedder`` that splits each call across forked copies of ``embedder``.
    ``submit`` starts the work and returns at once, so the caller can go on with its own
    (the ingest worker commits one claim while the next is embedded)."""

    def __init__(self, embedder: Embedder, copies: list[tuple[BaseProcess, Connection]]) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self._lost_logged = False
        self._copies = [_Copy(process, conn, self._lose_copies) for process, conn in copies]

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
        made = cls(embedder, copies)
        # Before multiprocessing's own exit hook ends the copies: an end at exit is no loss.
        atexit.register(made.close)
        return made

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    @property
    def pids(self) -> list[int]:
        return [c.process.pid for c in self._copies if c.process.pid is not None]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.submit(texts).result()

    def submit(self, texts: Sequence[str]) -> Pending:
        """Hands ``texts`` to the copies in parts of equal size (a few texts per copy at
        least), each to the copy with the least work waiting; ``result()`` gives the
        vectors in order. Even a few texts go to a copy: this process has work of its own."""
        with self._lock:
            copies = [c for c in self._copies if not c.lost]
            if not copies or not texts:
                return _here(texts, self._embedder)
            count = max(1, min(len(copies), len(texts) // MIN_TEXTS_PER_COPY))
            size = -(-len(texts) // count)
            parts = [_Part(list(texts[i : i + size])) for i in range(0, len(texts), size)]
            for part in parts:
                min(copies, key=lambda c: c.queued).give(part)
            return Pending(parts, self._embedder)

    def _lose_copies(self) -> None:
        """A copy died (killed, out of memory): the others may hold half-answered work, so
        every copy goes, and this process embeds from now on. Parts not answered are
        embedded here by whoever waits for them."""
        with self._lock:
            copies, self._copies = self._copies, []
        if not copies:
            return
        log.error("an embedding process ended; embedding in the ingest process from now on")
        for copy in copies:
            copy.close(kill=True)

    def close(self) -> None:
        with self._lock:
            copies, self._copies = self._copies, []
        for copy in copies:
            copy.close(kill=False)


def submit(embedder: Embedder, texts: Sequence[str]) -> Pending:
    """``texts`` handed to ``embedder``'s copies if it has any; otherwise embedded by this
    process when the result is asked for."""
    if isinstance(embedder, ForkedEmbedders):
        return embedder.submit(texts)
    return _here(texts, embedder)


def _here(texts: Sequence[str], embedder: Embedder) -> Pending:
    part = _Part(list(texts))
    part.done.set()  # without vectors: ``result()`` embeds it in this process
    return Pending([part], embedder)


def processes_wanted(setting: int) -> int:
    """``REACHSTORE_INGEST_EMBED_PROCESSES``: 0 means one per core this process may use
    (``reachstore_server/common/cores.py``: its CPU quota counts)."""
    return setting if setting > 0 else usable_cores()
