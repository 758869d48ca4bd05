"""An optional look inside the reach process while it is measured: ``py-spy record --gil``
in raw (collapsed-stack) format - only the thread holding the GIL is sampled, so the samples
are what keeps the process's one Python core busy - summed up as where they end (own time)
by function and by package, and which of the project's functions they pass through.

py-spy samples without stopping the process (``--nonblocking``), but it still takes CPU on
the same cores: figures from a profiled run are not the benchmark's figures.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

RATE_PER_S = 100
# "function (path/to/file.py:123)"; the line number is dropped so a function counts once.
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")


class PySpyRecording:
    """``with PySpyRecording(binary, pid, out): ...`` records for the duration of the block."""

    def __init__(self, binary: str, pid: int, out: Path) -> None:
        self.binary, self.pid, self.out = binary, pid, out
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpyRecording:
        self._proc = subprocess.Popen(
            [self.binary, "record", "--pid", str(self.pid), "--rate", str(RATE_PER_S)]
            + ["--gil", "--full-filenames", "--nonblocking"]
            + ["--format", "raw", "--output", str(self.out)],
            stdout=subprocess.DEVNULL,
            stderr=self.out.with_suffix(".log").open("wb"),
            start_new_session=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _short_path(path: str) -> str:
    """<package>/... under site-packages, reachstore_server/..., stdlib:<module path>, or as is."""
    if "site-packages/" in path:
        return path.rsplit("site-packages/", 1)[1]
    if "/reachstore_server/" in path:
        return "reachstore_server/" + path.rsplit("/reachstore_server/", 1)[1]
    stdlib = re.search(r"/lib/python3\.\d+/(.*)$", path)
    if stdlib:
        return "stdlib:" + stdlib[1]
    return path


def _package(short: str) -> str:
    """What a sample is charged to: a third-party package, a stdlib package or module, or
    a module of the project."""
    if short.startswith("<frozen importlib"):
        return "importlib"
    if short.startswith("stdlib:"):
        return "stdlib:" + short.removeprefix("stdlib:").split("/")[0].removesuffix(".py")
    parts = short.split("/")
    if parts[0] == "reachstore_server":
        return "/".join(parts[:3]).removesuffix(".py")
    return parts[0].removesuffix(".py")


def _frame(text: str) -> tuple[str, str]:
    m = _FRAME.match(text.strip())
    if m is None:
        return text.strip(), ""
    return m["func"], _short_path(m["path"])


def summarize(path: Path, top: int = 12) -> dict[str, Any]:
    """Shares of the samples: own time by function and by package; inclusive time of the
    project's own functions (reachstore_server/...)."""
    own: Counter[str] = Counter()
    own_pkg: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";") if "(" in f]
        if not frames:
            continue
        total += count
        func, short = frames[-1]
        own[f"{func} ({short})"] += count
        own_pkg[_package(short)] += count
        for name in {f"{f} ({s})" for f, s in frames if s.startswith("reachstore_server/")}:
            inclusive[name] += count

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, n / total) for name, n in counter.most_common(top)] if total else []

    return {
        "samples": total,
        "rate_per_s": RATE_PER_S,
        "own_by_function": shares(own),
        "own_by_package": shares(own_pkg),
        "inclusive_by_project_function": shares(inclusive),
    }
