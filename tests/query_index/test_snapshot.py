import hashlib
import json
import os
import struct

import numpy as np
import pytest

from reachstore_server.query.index import (
    NamespaceIndex,
    SnapshotCorrupt,
    read_snapshot_file,
    write_snapshot_file,
)
from reachstore_server.query.index.snapshot import MAGIC

from .conftest import DIM, chunk, unit_vectors

VECS = unit_vectors(40, seed=200)
QUERIES = [(VECS[3], "passage three"), (VECS[10], "熊猫"), (unit_vectors(1, seed=201)[0], "word")]


def populated() -> NamespaceIndex:
    idx = NamespaceIndex(DIM)
    for d in range(10):
        idx.upsert_document(
            f"doc-{d}",
            [
                chunk(
                    d * 4 + j,
                    f"doc-{d}",
                    f"passage {['one', 'two', 'three'][j]} of document {d} word{d} 大熊猫 Straße"
                    if d % 2
                    else f"文档{d} 熊猫 {j}",
                    VECS[d * 4 + j],
                    chunk_index=j,
                    metadata={"lang": "zh" if d % 2 == 0 else "en", "d": str(d)},
                )
                for j in range(3)
            ],
        )
    idx.upsert_document("empty-doc", [])
    return idx


def results(idx: NamespaceIndex):
    return [
        [
            (h.chunk_id, h.document_id, h.chunk_index, h.text, h.metadata, h.content_hash, h.score)
            for h in idx.search(v, t, 5)
        ]
        for v, t in QUERIES
    ] + [[h.chunk_id for h in idx.search(VECS[3], "word", 10, filter={"lang": "en"})]]


def test_round_trip_restores_records_counts_seq_and_search_results():
    original = populated()
    data = original.snapshot(seq=42)
    loaded, seq = NamespaceIndex.from_snapshot(data)
    assert seq == 42
    assert (
        (loaded.document_count, loaded.chunk_count)
        == (original.document_count, original.chunk_count)
        == (11, 30)
    )
    assert loaded.has_document("empty-doc")
    assert results(loaded) == results(original)
    for d in ("doc-1", "doc-4"):
        a, b = original.document_chunks(d), loaded.document_chunks(d)
        assert [(c.chunk_id, c.chunk_index, c.text, c.metadata, c.content_hash) for c in a] == [
            (c.chunk_id, c.chunk_index, c.text, c.metadata, c.content_hash) for c in b
        ]
        assert all(np.array_equal(x.vector, y.vector) for x, y in zip(a, b, strict=False))


def test_empty_index_round_trips():
    loaded, seq = NamespaceIndex.from_snapshot(NamespaceIndex(DIM).snapshot(seq=0))
    assert (loaded.document_count, loaded.chunk_count, seq) == (0, 0, 0)


def test_snapshot_is_deterministic_with_a_json_header():
    data = populated().snapshot(seq=1)
    assert data == populated().snapshot(seq=1)
    assert data.startswith(MAGIC)
    _, header, payload_start = split(data)
    assert (header["dim"], header["seq"], header["document_count"], header["chunk_count"]) == (
        DIM,
        1,
        11,
        30,
    )
    assert header["payload_sha256"] == hashlib.sha256(data[payload_start:]).hexdigest()


def test_loading_a_large_snapshot_builds_hnsw_directly():
    vecs = unit_vectors(300, seed=202)
    idx = NamespaceIndex(DIM, hnsw_threshold=1000)
    for i in range(300):
        idx.upsert_document(f"d{i}", [chunk(i, f"d{i}", f"t{i}", vecs[i])])
    loaded, _ = NamespaceIndex.from_snapshot(idx.snapshot(seq=3), hnsw_threshold=100)
    assert loaded.dense_mode == "hnsw"
    assert loaded._dense.rebuilds == 1  # built once, straight from the records
    assert loaded.search(vecs[17], "t17", 1)[0].chunk_id == 17


def test_file_helpers_write_atomically_and_read_back(tmp_path):
    data = populated().snapshot(seq=7)
    path = tmp_path / "ns.snap"
    write_snapshot_file(path, b"old contents")
    write_snapshot_file(path, data)
    assert read_snapshot_file(path) == data
    assert os.listdir(tmp_path) == ["ns.snap"]  # no temp file left behind
    _, seq = NamespaceIndex.from_snapshot(read_snapshot_file(path))
    assert seq == 7


# ---- corruption --------------------------------------------------------------------------


def split(data: bytes) -> tuple[int, dict, int]:
    (header_len,) = struct.unpack_from("<I", data, 12)
    header = json.loads(data[48 : 48 + header_len])
    return header_len, header, 48 + header_len


def rebuild_with_header(data: bytes, header: dict) -> bytes:
    """A snapshot with an edited header whose checksums are all valid again."""
    _, _, payload_start = split(data)
    payload = data[payload_start:]
    header = dict(
        header, payload_length=len(payload), payload_sha256=hashlib.sha256(payload).hexdigest()
    )
    hb = json.dumps(header).encode()
    return MAGIC + struct.pack("<HHI", 1, 0, len(hb)) + hashlib.sha256(hb).digest() + hb + payload


def expect_corrupt(data: bytes, fragment: str) -> None:
    with pytest.raises(SnapshotCorrupt) as info:
        NamespaceIndex.from_snapshot(data)
    assert fragment in info.value.reason


@pytest.fixture(scope="module")
def good() -> bytes:
    return populated().snapshot(seq=5)


@pytest.mark.parametrize("where", ["ids", "vectors", "records", "last"])
def test_a_flipped_payload_byte_is_detected(good, where):
    _, header, payload_start = split(good)
    off = {
        "ids": 3,
        "vectors": header["sections"]["vectors"][0] + 100,
        "records": header["sections"]["records"][0] + 5,
    }
    pos = len(good) - 1 if where == "last" else payload_start + off[where]
    bad = bytearray(good)
    bad[pos] ^= 0x01
    expect_corrupt(bytes(bad), "payload checksum mismatch")


def test_a_flipped_header_byte_is_detected(good):
    bad = bytearray(good)
    bad[60] ^= 0x20
    expect_corrupt(bytes(bad), "header checksum mismatch")


@pytest.mark.parametrize("keep", [0, 7, 16, 47, 60, -1, -5000])
def test_truncated_snapshots_are_detected(good, keep):
    expect_corrupt(good[:keep] if keep >= 0 else good[:keep], "truncated")


def test_trailing_garbage_is_detected(good):
    expect_corrupt(good + b"\x00", "unexpected bytes")


def test_wrong_magic_is_detected(good):
    expect_corrupt(b"NOTASNAP" + good[8:], "bad magic")


def test_unsupported_version_is_detected(good):
    expect_corrupt(good[:8] + struct.pack("<H", 2) + good[10:], "unsupported format version 2")


def test_header_counts_that_disagree_with_the_records_are_detected(good):
    _, header, _ = split(good)
    expect_corrupt(rebuild_with_header(good, dict(header, document_count=12)), "documents")
    n = header["chunk_count"]
    expect_corrupt(rebuild_with_header(good, dict(header, chunk_count=n - 1)), "section")
    expect_corrupt(rebuild_with_header(good, dict(header, dim=DIM * 2)), "section")
    expect_corrupt(rebuild_with_header(good, dict(header, seq=-1)), "seq")


def test_records_that_disagree_with_the_ids_are_detected(good):
    # A consistent-looking snapshot whose documents claim one chunk fewer than stored.
    _, header, payload_start = split(good)
    payload = bytearray(good[payload_start:])
    r0, rlen = header["sections"]["records"]
    meta = json.loads(bytes(payload[r0 : r0 + rlen]))
    meta["documents"][0][1] -= 1
    mb = json.dumps(meta, ensure_ascii=False).encode()
    new_payload = bytes(payload[:r0]) + mb
    header = dict(header, sections=dict(header["sections"], records=[r0, len(mb)]))
    data = good[:payload_start] + new_payload
    expect_corrupt(rebuild_with_header(data, header), "documents account for")


def test_duplicate_chunk_ids_are_detected(good):
    _, header, payload_start = split(good)
    payload = bytearray(good[payload_start:])
    payload[8:16] = payload[0:8]  # second id := first id
    data = good[:payload_start] + bytes(payload)
    expect_corrupt(rebuild_with_header(data, header), "duplicate chunk ids")
