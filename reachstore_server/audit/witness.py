"""Witnesses: copies of every signed checkpoint kept where the database's owner cannot
rewrite them through the database (after CloudTrail's digest files in a separate bucket
and Certificate Transparency's witnesses of signed tree heads).

Each witness holds one line per checkpoint (and per unvouched head, below), a JSON object:

    {"n": 7, "prev": <SHA-256 of line 6's text>, "tenant": ..., "seq": ..., "head_hash": ...,
     "signed_at": ..., "key_id": ..., "signature": <the checkpoint's>,
     "line_signature": <Ed25519 over the line without this field>}

Lines are numbered and chained, and each is signed on its own: a line removed from the
middle, edited or reordered shows without the database. A line removed from the end is
found by the cross-check in ``reachstore_server/audit/verify.py``: the database then holds a
signed checkpoint the witness does not.

Two kinds: an append-only file (opened with O_APPEND, flock-ed while a line is added, and
fsync-ed before the checkpoint counts as witnessed; put it on another volume, one the
database's owner cannot write) and an HTTP endpoint of another system (each line POSTed
as JSON; a GET returns every line kept, one per line, which is what Verify reads).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from reachstore_server.audit.chain import GENESIS, canonical_json
from reachstore_server.audit.signing import PrivateKey, PublicKey
from reachstore_server.common.config_errors import ConfigError

WITNESS_FILE = "REACHSTORE_AUDIT_WITNESS_FILE"
WITNESS_URL = "REACHSTORE_AUDIT_WITNESS_URL"
HTTP_TIMEOUT_S = 10.0
TAIL_BYTES = 8192

CHECKPOINT_FIELDS = ("tenant", "seq", "head_hash", "signed_at", "key_id", "signature")

# What a witness line says of its head. ``checkpoint``: the head was signed on its cadence
# (the database holds the same checkpoint). ``unvouched``: the head the audit service found
# when it started, beyond its tenant's last checkpoint: the events up to it were stored by
# a process that stopped without signing them, so nothing vouches that they are as stored.
CHECKPOINT = "checkpoint"
UNVOUCHED = "unvouched"
# ``appended``: a chain's head right after an append, witnessed before the append is
# acknowledged, so events stored since the last checkpoint have a copy outside the
# database too (deleting them, head and all, shows as ``truncated``).
APPENDED = "appended"
KINDS = (CHECKPOINT, UNVOUCHED, APPENDED)


@dataclasses.dataclass(frozen=True)
class Head:
    """A signed checkpoint as a witness keeps it (and as the database row holds it)."""

    tenant: str
    seq: int
    head_hash: str
    signed_at: str
    key_id: str
    signature: str
    kind: str = CHECKPOINT

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CHECKPOINT_FIELDS}


def line_digest(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


def make_line(key: PrivateKey, head: Head, n: int, prev: str) -> str:
    body: dict[str, Any] = {"n": n, "prev": prev, **head.fields()}
    if head.kind != CHECKPOINT:  # lines of checkpoints read as they always have
        body["kind"] = head.kind
    body["line_signature"] = key.sign_bytes(canonical_json(body).encode("utf-8"))
    return canonical_json(body)


@dataclasses.dataclass(frozen=True)
class WitnessBreak:
    line: int
    tenant: str
    seq: int
    detail: str


@dataclasses.dataclass
class WitnessRead:
    """What one witness vouches for: its heads in order, or where it stops making sense."""

    name: str
    heads: list[Head] = dataclasses.field(default_factory=list)
    broken: WitnessBreak | None = None


def read_lines(name: str, lines: Sequence[str], public: PublicKey) -> WitnessRead:
    """Checks a witness's lines (numbering, chaining, both signatures) and returns the heads
    up to the first line that fails."""
    read = WitnessRead(name)
    prev = GENESIS
    for number, line in enumerate(lines, start=1):
        tenant, seq = "", 0
        try:
            body = json.loads(line)
            tenant, seq = str(body.get("tenant", "")), int(body.get("seq", 0))
            signature = body.pop("line_signature")
            kind = body.get("kind", CHECKPOINT)
            if kind not in KINDS:
                raise ValueError(kind)
            head = Head(**{name: body[name] for name in CHECKPOINT_FIELDS}, kind=kind)
        except (ValueError, TypeError, KeyError, AttributeError):
            read.broken = WitnessBreak(number, tenant, seq, f"line {number} is not a witness line")
            return read
        problem = None
        if body.get("n") != number:
            problem = f"line {number} is numbered {body.get('n')}: lines before it were removed"
        elif body.get("prev") != prev:
            problem = f"line {number} does not follow line {number - 1}: lines were changed"
        elif not public.verify_bytes(canonical_json(body).encode("utf-8"), str(signature)):
            problem = f"line {number} is not signed with {public.key_id}"
        elif not public.verify(
            head.tenant, head.seq, head.head_hash, head.signed_at, head.signature
        ):
            problem = f"line {number} holds a checkpoint whose signature does not verify"
        if problem is not None:
            read.broken = WitnessBreak(number, tenant, seq, problem)
            return read
        read.heads.append(head)
        prev = line_digest(line)
    return read


class Witness(Protocol):
    name: str

    def append(self, key: PrivateKey, heads: Sequence[Head]) -> None:
        """Adds one line per head; returns once they are kept, raises OSError or
        httpx.HTTPError when they may not be."""

    def lines(self) -> list[str]:
        """Every line the witness keeps, oldest first."""


class FileWitness:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"file {path}"

    def append(self, key: PrivateKey, heads: Sequence[Head]) -> None:
        if not heads:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # Several audit replicas may share the file: numbering must not interleave.
            fcntl.flock(fd, fcntl.LOCK_EX)
            n, prev = self._last_line(fd)
            out = []
            for head in heads:
                n += 1
                line = make_line(key, head, n, prev)
                prev = line_digest(line)
                out.append(line + "\n")
            os.write(fd, "".join(out).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def _last_line(self, fd: int) -> tuple[int, str]:
        """The last line's number and digest (0 and the genesis for an empty file)."""
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, GENESIS
        start = max(0, size - TAIL_BYTES)
        tail = os.pread(fd, size - start, start).decode("utf-8", "replace")
        last = tail.rstrip("\n").rsplit("\n", 1)[-1]
        try:
            return int(json.loads(last)["n"]), line_digest(last)
        except (ValueError, KeyError, TypeError) as exc:
            raise OSError(
                f"the witness file {self.path} ends in a line it cannot continue"
            ) from exc

    def lines(self) -> list[str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [line for line in text.split("\n") if line]


class HttpWitness:
    """POSTs each line to ``url`` and GETs them all back from the same URL; numbering goes
    on from the receiver's last line, read before the first append of a process."""

    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url
        self.name = f"url {url}"
        self._client = client or httpx.Client(timeout=HTTP_TIMEOUT_S)
        self._last: tuple[int, str] | None = None

    def append(self, key: PrivateKey, heads: Sequence[Head]) -> None:
        if self._last is None:
            kept = self.lines()
            self._last = (len(kept), line_digest(kept[-1]) if kept else GENESIS)
        n, prev = self._last
        for head in heads:
            line = make_line(key, head, n + 1, prev)
            answer = self._client.post(
                self.url, content=line.encode("utf-8"), headers={"Content-Type": "application/json"}
            )
            answer.raise_for_status()
            n, prev = n + 1, line_digest(line)
            self._last = (n, prev)

    def lines(self) -> list[str]:
        answer = self._client.get(self.url)
        answer.raise_for_status()
        return [line for line in answer.text.split("\n") if line]


def witnesses_from_env(env: Mapping[str, str]) -> list[Witness]:
    found: list[Witness] = []
    if env.get(WITNESS_FILE):
        found.append(FileWitness(Path(env[WITNESS_FILE])))
    for url in filter(None, (u.strip() for u in env.get(WITNESS_URL, "").split(","))):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{WITNESS_URL}: {url!r} is not an http:// or https:// URL")
        found.append(HttpWitness(url))
    return found


class Delivery:
    """Heads not yet kept by each witness, retried on every checkpoint tick: a witness that
    is away delays its copy, never the checkpoint."""

    def __init__(self, witnesses: Sequence[Witness], key: PrivateKey) -> None:
        self.witnesses = list(witnesses)
        self._key = key
        # Appends (on the service's worker threads) and ticks deliver at once.
        self._lock = threading.Lock()
        self._pending: dict[str, list[Head]] = {w.name: [] for w in self.witnesses}
        self.last_witnessed_at: float | None = None

    def deliver(self, heads: Sequence[Head], now: Callable[[], float]) -> list[str]:
        """Hands ``heads`` (and whatever is still pending) to every witness; returns the
        names of those that failed."""
        with self._lock:
            return self._deliver(heads, now)

    def _deliver(self, heads: Sequence[Head], now: Callable[[], float]) -> list[str]:
        failed = []
        delivered = False
        for witness in self.witnesses:
            pending = self._pending[witness.name]
            pending.extend(heads)
            if not pending:
                continue
            try:
                witness.append(self._key, pending)
            except (OSError, httpx.HTTPError):
                failed.append(witness.name)
                continue
            pending.clear()
            delivered = True
        if delivered and not failed:
            self.last_witnessed_at = now()
        return failed

    def catch_up(self, latest: Sequence[Head], now: Callable[[], float]) -> list[str]:
        """At start: the latest database checkpoint of each tenant that a witness lacks
        (the process stopped between signing and witnessing) is witnessed now."""
        failed = []
        for witness in self.witnesses:
            try:
                kept = {(h["tenant"], h["seq"], h["signature"]) for h in _bodies(witness.lines())}
            except (OSError, httpx.HTTPError):
                failed.append(witness.name)
                continue
            missing = [h for h in latest if (h.tenant, h.seq, h.signature) not in kept]
            self._pending[witness.name].extend(missing)
        return failed + self.deliver([], now)


def _bodies(lines: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
