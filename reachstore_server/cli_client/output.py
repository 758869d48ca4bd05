"""What the client commands print: results on stdout (or one JSON document with
``--json``), errors and progress on stderr, and nothing from the server reaching a terminal
unfiltered."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from reachstore import Failure, ReachstoreError

# A plain progress line at most this often when stderr is not a terminal (logs, CI).
PLAIN_EVERY_S = 5.0
# How often the bar on a terminal is redrawn at most: often enough to look live.
BAR_EVERY_S = 0.1
BAR_WIDTH = 24


def jsonable(value: Any) -> Any:
    """SDK models (frozen dataclasses) as the plain dicts and lists the JSON API uses."""
    if isinstance(value, Failure):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    print(json.dumps(jsonable(value), ensure_ascii=False), flush=True)


def say(text: str = "") -> None:
    print(text, flush=True)


def note(text: str) -> None:
    print(f"reachstore: {text}", file=sys.stderr, flush=True)


def clean(text: str) -> str:
    """Text from the server or from files on one line, without control characters: a
    document can hold escape sequences that would rewrite the terminal."""
    kept = (" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    return re.sub(r"\s+", " ", "".join(kept)).strip()


def shorten(text: str, limit: int) -> str:
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def retry_advice(failure: Failure | Mapping[str, Any]) -> str:
    if not failure["retryable"]:
        return "not retryable"
    wait = failure["retry_after_ms"]
    return f"retry after {wait} ms" if wait is not None else "retryable"


def error_line(error: ReachstoreError) -> str:
    """The one stderr line of a refused request: code, category, message, what to do."""
    return f"{error.code} ({error.category}): {clean(error.message)}; {retry_advice(error.failure)}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def duration(seconds: float) -> str:
    seconds = max(0, math.ceil(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Progress of ``total`` units on stderr: a bar redrawn in place on a terminal, a plain
    line every few seconds otherwise. The rate counts only what finished during this run
    (a resumed ingest starts with some already done), so the ETA is honest."""

    def __init__(
        self,
        total: int,
        unit: str,
        *,
        done: int = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._clock = clock
        self._start = clock()
        self._initial = done
        self._done = done
        # A bar appears at once; a plain line only once there was time for progress, so a
        # quick run leaves no noise in a log.
        self._last_draw = -math.inf if self.tty else self._start
        self._drawn = False  # the bar is on the terminal's current line
        self._detail = ""
        self._shown: tuple[int, str] | None = None  # what the last drawing said

    def rate(self) -> float:
        elapsed = self._clock() - self._start
        return (self._done - self._initial) / elapsed if elapsed > 0 else 0.0

    def line(self, detail: str = "") -> str:
        rate = self.rate()
        left = self.total - self._done
        eta = duration(left / rate) if rate > 0 else "--:--"
        text = f"{self._done}/{self.total} {self.unit}  {rate:.1f} {self.unit}/s  ETA {eta}"
        return f"{text}  {detail}" if detail else text

    def due(self) -> bool:
        """Whether an update now would be drawn."""
        every = BAR_EVERY_S if self.tty else PLAIN_EVERY_S
        return self._clock() - self._last_draw >= every

    def update(self, done: int, detail: str = "") -> None:
        self._done, self._detail = done, detail
        if self.due():
            self._draw()

    def _draw(self) -> None:
        self._last_draw = self._clock()
        self._shown = (self._done, self._detail)
        if self.tty:
            filled = round(BAR_WIDTH * self._done / self.total) if self.total else BAR_WIDTH
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            # \r and "erase to end of line" redraw the bar in place.
            self.stream.write(f"\r[{bar}] {self.line(self._detail)}\x1b[K")
            self._drawn = True
        else:
            self.stream.write(f"reachstore: {self.line(self._detail)}\n")
        self.stream.flush()

    def clear(self) -> None:
        """Takes the bar off its line, so that a result line can be printed there."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False
            self._last_draw = -math.inf  # back at once, under the line printed meanwhile

    def finish(self, done: int, detail: str = "") -> None:
        """The final count, drawn if progress was shown at all and it is news; on a
        terminal the bar then keeps its line."""
        self._done, self._detail = done, detail
        if self._shown is not None and self._shown != (done, detail):
            self._draw()
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
