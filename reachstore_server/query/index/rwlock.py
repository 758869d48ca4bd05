"""A small writer-preferring readers-writer lock whose readers honour a cancel token."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .cancel import CancelToken

__all__ = ["ReadWriteLock"]

# While a reader waits for a writer it re-checks its cancel token this often (seconds).
# Writers are short (one document) except graph rebuilds, so waiting is rare.
_POLL = 0.002


class ReadWriteLock:
    """Many concurrent readers or one writer. Waiting writers block new readers, so a
    stream of searches cannot starve ingest."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self, cancel: CancelToken | None = None) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                if cancel is not None:
                    cancel.check()
                self._cond.wait(timeout=_POLL if cancel is not None else None)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
