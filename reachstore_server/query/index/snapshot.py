"""Binary snapshot of a namespace index's chunk records (no pickle).

Layout (all integers little-endian)::

    offset  size  field
    0       8     magic  b"RSNSIDX\\0"
    8       2     format version (uint16), currently 1
    10      2     reserved, 0
    12      4     header length H (uint32)
    16      32    SHA-256 of the header bytes
    48      H     header: UTF-8 JSON object
    48+H    P     payload

The header holds ``dim``, ``seq``, ``document_count``, ``chunk_count``, ``payload_length``,
``payload_sha256`` and the byte ranges of the three payload sections:

* ``ids``: ``chunk_count`` int64 chunk ids;
* ``vectors``: one ``(chunk_count, dim)`` float32 array (``ndarray.tobytes``);
* ``records``: UTF-8 JSON ``{"documents": [[document_id, n_chunks], ...],
  "chunks": [{"i": chunk_index, "t": text, "m": metadata, "h": content_hash}, ...]}``
  where chunks are grouped by document in the order of ``documents``.

Every byte is covered by a checksum (header by its own SHA-256, payload by the one in
the header), so a flipped bit anywhere is detected. Decoding validates everything and
raises :class:`SnapshotCorrupt` with a reason instead of returning partial data.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .records import ChunkRecord

__all__ = [
    "SnapshotCorrupt",
    "SnapshotContents",
    "encode_snapshot",
    "decode_snapshot",
    "write_snapshot_file",
    "read_snapshot_file",
    "MAGIC",
    "FORMAT_VERSION",
]

MAGIC = b"RSNSIDX\x00"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sHHI32s")  # magic, version, reserved, header length, header sha


class SnapshotCorrupt(Exception):
    """The snapshot cannot be used; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"corrupt snapshot: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class SnapshotContents:
    dim: int
    seq: int
    documents: list[tuple[str, list[ChunkRecord]]]


def encode_snapshot(dim: int, seq: int, documents: list[tuple[str, list[ChunkRecord]]]) -> bytes:
    """Serialise ``documents`` (each a document id and its chunk records, in order)."""
    records = [rec for _, chunks in documents for rec in chunks]
    n = len(records)
    ids = np.asarray([rec.chunk_id for rec in records], dtype="<i8")
    if n:
        vectors = np.stack([np.asarray(rec.vector, dtype="<f4").reshape(dim) for rec in records])
    else:
        vectors = np.zeros((0, dim), dtype="<f4")
    meta = {
        "documents": [[doc_id, len(chunks)] for doc_id, chunks in documents],
        "chunks": [
            {"i": rec.chunk_index, "t": rec.text, "m": rec.metadata, "h": rec.content_hash}
            for rec in records
        ],
    }
    ids_b = ids.tobytes()
    vec_b = np.ascontiguousarray(vectors).tobytes()
    meta_b = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    payload = b"".join((ids_b, vec_b, meta_b))
    header = {
        "format": "reachstore.namespace_index",
        "dim": int(dim),
        "seq": int(seq),
        "document_count": len(documents),
        "chunk_count": n,
        "payload_length": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "sections": {
            "ids": [0, len(ids_b)],
            "vectors": [len(ids_b), len(vec_b)],
            "records": [len(ids_b) + len(vec_b), len(meta_b)],
        },
        "dtypes": {"ids": "<i8", "vectors": "<f4"},
    }
    header_b = json.dumps(header, separators=(",", ":")).encode("utf-8")
    prefix = _PREFIX.pack(
        MAGIC, FORMAT_VERSION, 0, len(header_b), hashlib.sha256(header_b).digest()
    )
    return b"".join((prefix, header_b, payload))


def decode_snapshot(data: bytes | bytearray | memoryview) -> SnapshotContents:
    """Parse and validate a snapshot. Raises :class:`SnapshotCorrupt`."""
    buf = memoryview(data).cast("B")
    if len(buf) < _PREFIX.size:
        raise SnapshotCorrupt(
            f"truncated: {len(buf)} bytes is shorter than the {_PREFIX.size}-byte prefix"
        )
    magic, version, _reserved, header_len, header_sha = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise SnapshotCorrupt(f"bad magic {bytes(magic)!r}")
    if version != FORMAT_VERSION:
        raise SnapshotCorrupt(
            f"unsupported format version {version} (this build reads {FORMAT_VERSION})"
        )
    header_end = _PREFIX.size + header_len
    if len(buf) < header_end:
        raise SnapshotCorrupt(f"truncated: header needs {header_end} bytes, have {len(buf)}")
    header_b = bytes(buf[_PREFIX.size : header_end])
    if hashlib.sha256(header_b).digest() != header_sha:
        raise SnapshotCorrupt("header checksum mismatch")
    try:
        header = json.loads(header_b.decode("utf-8"))
        dim = _int(header["dim"], "dim", minimum=1)
        seq = _int(header["seq"], "seq", minimum=0)
        doc_count = _int(header["document_count"], "document_count", minimum=0)
        chunk_count = _int(header["chunk_count"], "chunk_count", minimum=0)
        payload_len = _int(header["payload_length"], "payload_length", minimum=0)
        payload_sha = str(header["payload_sha256"])
        sections = {
            name: (_int(header["sections"][name][0], name), _int(header["sections"][name][1], name))
            for name in ("ids", "vectors", "records")
        }
    except SnapshotCorrupt:
        raise
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"unreadable header: {exc!r}") from None

    payload = buf[header_end:]
    if len(payload) < payload_len:
        raise SnapshotCorrupt(f"truncated: payload has {len(payload)} of {payload_len} bytes")
    if len(payload) > payload_len:
        raise SnapshotCorrupt(f"{len(payload) - payload_len} unexpected bytes after the payload")
    if hashlib.sha256(payload).hexdigest() != payload_sha:
        raise SnapshotCorrupt("payload checksum mismatch")

    expected = {
        "ids": (0, chunk_count * 8),
        "vectors": (chunk_count * 8, chunk_count * dim * 4),
    }
    for name, rng in expected.items():
        if sections[name] != rng:
            raise SnapshotCorrupt(
                f"section {name} is {sections[name]}, expected {rng} for {chunk_count} chunks"
            )
    rec_off, rec_len = sections["records"]
    if rec_off != chunk_count * 8 + chunk_count * dim * 4 or rec_off + rec_len != payload_len:
        raise SnapshotCorrupt("records section does not fill the rest of the payload")

    ids = np.frombuffer(payload, dtype="<i8", count=chunk_count, offset=0).astype(np.int64)
    vectors = np.frombuffer(payload, dtype="<f4", count=chunk_count * dim, offset=chunk_count * 8)
    vectors = vectors.astype(np.float32).reshape(chunk_count, dim)
    vectors.flags.writeable = False
    if not np.isfinite(vectors).all():
        raise SnapshotCorrupt("non-finite values in vectors")
    if len(np.unique(ids)) != chunk_count:
        raise SnapshotCorrupt("duplicate chunk ids")

    try:
        meta = json.loads(bytes(payload[rec_off : rec_off + rec_len]).decode("utf-8"))
        documents_meta = meta["documents"]
        chunks_meta = meta["chunks"]
        if not isinstance(documents_meta, list) or not isinstance(chunks_meta, list):
            raise TypeError("documents and chunks must be lists")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"unreadable records: {exc!r}") from None
    if len(documents_meta) != doc_count:
        raise SnapshotCorrupt(
            f"header says {doc_count} documents, records hold {len(documents_meta)}"
        )
    if len(chunks_meta) != chunk_count:
        raise SnapshotCorrupt(f"header says {chunk_count} chunks, records hold {len(chunks_meta)}")

    documents: list[tuple[str, list[ChunkRecord]]] = []
    seen_docs: set[str] = set()
    pos = 0
    try:
        for entry in documents_meta:
            doc_id, n = entry
            if not isinstance(doc_id, str) or doc_id in seen_docs:
                raise ValueError(f"bad or duplicate document id {doc_id!r}")
            seen_docs.add(doc_id)
            n = _int(n, "chunks per document", minimum=0)
            if pos + n > chunk_count:
                raise ValueError("documents claim more chunks than the snapshot holds")
            chunks = []
            for row in range(pos, pos + n):
                c = chunks_meta[row]
                metadata = c["m"]
                if not isinstance(metadata, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
                ):
                    raise ValueError("metadata must map str to str")
                if not isinstance(c["t"], str) or not isinstance(c["h"], str):
                    raise ValueError("text and content_hash must be strings")
                chunks.append(
                    ChunkRecord(
                        chunk_id=int(ids[row]),
                        document_id=doc_id,
                        chunk_index=_int(c["i"], "chunk_index"),
                        text=c["t"],
                        metadata=metadata,
                        content_hash=c["h"],
                        vector=vectors[row],
                    )
                )
            documents.append((doc_id, chunks))
            pos += n
    except SnapshotCorrupt:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotCorrupt(f"inconsistent records: {exc}") from None
    if pos != chunk_count:
        raise SnapshotCorrupt(f"documents account for {pos} chunks, snapshot holds {chunk_count}")
    return SnapshotContents(dim=dim, seq=seq, documents=documents)


def _int(value: object, name: str, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SnapshotCorrupt(f"{name} is not an integer")
    if minimum is not None and value < minimum:
        raise SnapshotCorrupt(f"{name} is {value}, must be >= {minimum}")
    return value


def write_snapshot_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, fsync,
    ``os.replace``, then fsync the directory so the rename itself is durable."""
    target = Path(path)
    directory = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_snapshot_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a snapshot file (pass them to ``NamespaceIndex.from_snapshot``)."""
    return Path(path).read_bytes()
