"""The query service's derived indexes: one per namespace, kept current from the store.

The store is the truth. An index starts from its snapshot file when that is intact, or is
rebuilt from the store's chunks when the snapshot is missing or corrupt; while that runs
the namespace answers with a TRANSIENT "rebuilding" failure instead of blocking or
crashing. Before each search the index replays the namespace's changes since its own seq
(one indexed read when nothing changed), so a document is searchable on the first query
after its ingest task completes. Snapshots are written in the background and at shutdown.

A member of a sharded tier may hold only some partitions of a large namespace
(docs/SHARDS.md, "Partitions"): an index then holds the namespace's documents of that
partition alone, and everything here is kept per (namespace, partition). A namespace
never split is its one partition ``WHOLE``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from reachstore_server.query import freed_memory
from reachstore_server.query.index import (
    CancelToken,
    ChunkRecord,
    NamespaceIndex,
    SnapshotCorrupt,
    TermStats,
    read_snapshot_file,
    write_snapshot_file,
)
from reachstore_server.query.shards.partitions import WHOLE, Part, parse_label, partition_of
from reachstore_server.storage.repository import NamespaceInfo, SemanticStore, StoredChunk

log = logging.getLogger(__name__)

# Replaying more changed documents than this re-reads the whole namespace instead: one
# sequential scan beats thousands of keyed look-ups.
FULL_RELOAD_ABOVE = 1000
# A partition's search returns this many times the hits asked for (``search``).
PARTITION_DEPTH = 2


@dataclasses.dataclass
class Slot:
    tenant: str
    namespace_id: int
    name: str
    dimension: int
    part: Part = WHOLE
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    index: NamespaceIndex | None = None
    seq: int = 0
    dirty: bool = False
    state: str = "loading"  # loading | rebuilding | ready


def _record(chunk: StoredChunk) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=chunk.id,
        document_id=chunk.document_id,
        chunk_index=chunk.chunk_index,
        text=chunk.text,
        metadata=chunk.metadata,
        content_hash=chunk.content_hash,
        vector=np.frombuffer(chunk.embedding, dtype=np.float32),
    )


def _by_document(chunks: Iterable[StoredChunk], part: Part) -> dict[str, list[ChunkRecord]]:
    """The chunks of the partition's documents, by document. The others are read and
    passed over: memory is what a partition saves, and one sequential read of the
    namespace is still cheaper than one per partition in the store's own order."""
    grouped: dict[str, list[ChunkRecord]] = defaultdict(list)
    for chunk in chunks:
        if part.count > 1 and partition_of(chunk.document_id, part.count) != part.index:
            continue
        grouped[chunk.document_id].append(_record(chunk))
    return grouped


# What an index is kept by: the namespace's id and the partition it holds.
SlotKey = tuple[int, Part]


def _key_of(file_name: str) -> SlotKey | None:
    """The index a snapshot file holds, by its name (``_path``): ``12.snap`` is namespace
    12 whole, ``12.p3of8.snap`` its partition 3 of 8; None for any other name."""
    stem, sep, rest = file_name.partition(".")
    if not stem.isascii() or not stem.isdigit():
        return None
    if rest == "snap":
        return int(stem), WHOLE
    label = rest.removesuffix(".snap").removeprefix("p").replace("of", "/")
    part = parse_label(label) if sep and rest.startswith("p") else None
    return (int(stem), part) if part is not None else None


class IndexManager:
    def __init__(self, store: SemanticStore, snapshot_dir: Path, rebuild_delay_ms: int = 0) -> None:
        self._store = store
        self._dir = snapshot_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._rebuild_delay_s = rebuild_delay_ms / 1000
        self._slots: dict[SlotKey, Slot] = {}
        # The same slots by (tenant, name, part), for the shard router's "do I have it ready?".
        self._named: dict[tuple[str, str, Part], Slot] = {}
        self._slots_lock = threading.Lock()

    # --- loading ------------------------------------------------------------------------

    def _path(self, namespace_id: int, part: Part = WHOLE) -> Path:
        if part.count <= 1:
            return self._dir / f"{namespace_id}.snap"
        return self._dir / f"{namespace_id}.p{part.index}of{part.count}.snap"

    def slot(self, tenant: str, info: NamespaceInfo, part: Part = WHOLE) -> Slot:
        """The slot of the namespace (or of one partition of it); the first call starts
        loading it in the background."""
        with self._slots_lock:
            slot = self._slots.get((info.id, part))
            if slot is not None:
                return slot
            slot = Slot(tenant, info.id, info.name, info.dimension, part)
            self._slots[(info.id, part)] = slot
            self._named[(tenant, info.name, part)] = slot
        threading.Thread(
            target=self._load, args=(slot,), name=f"load-{info.id}", daemon=True
        ).start()
        return slot

    def held(self, tenant: str, info: NamespaceInfo, part: Part = WHOLE) -> Slot | None:
        """The slot, if this replica holds (or is loading) it; None otherwise, and then
        nothing starts loading."""
        with self._slots_lock:
            slot = self._slots.get((info.id, part))
        return slot if slot is not None and slot.tenant == tenant else None

    def state_of(self, namespace_id: int) -> str:
        """The index's state in this replica: loading, rebuilding, ready, or not_loaded
        when nothing has needed it since the replica started. Of the partitions held, the
        least ready."""
        with self._slots_lock:
            states = {s.state for (i, _), s in self._slots.items() if i == namespace_id}
        for state in ("rebuilding", "loading", "ready"):
            if state in states:
                return state
        return "not_loaded"

    def chunks_held(self) -> int:
        """Chunks in the indexes this replica holds (what its memory grows with)."""
        with self._slots_lock:
            slots = list(self._slots.values())
        return sum(s.index.chunk_count for s in slots if s.index is not None)

    def warm(self) -> None:
        """Starts loading every namespace of the store (at service start)."""
        for tenant, info in self._store.all_namespaces():
            self.slot(tenant, info)

    def loaded(self) -> list[SlotKey]:
        """What this replica has a slot for (loading or ready)."""
        with self._slots_lock:
            return list(self._slots)

    def ready_named(self, tenant: str, name: str, part: Part = WHOLE) -> bool:
        """Whether this replica has the namespace's (partition's) index ready to search."""
        slot = self._named.get((tenant, name, part))
        return slot is not None and slot.ready.is_set()

    def loading_named(self) -> list[tuple[str, str, Part]]:
        """(tenant, name, part) of the indexes still loading here."""
        with self._slots_lock:
            return [
                (s.tenant, s.name, s.part) for s in self._slots.values() if not s.ready.is_set()
            ]

    def held_ready(self) -> list[Slot]:
        """The slots whose index is ready."""
        with self._slots_lock:
            return [s for s in self._slots.values() if s.ready.is_set()]

    def drop(self, namespace_id: int, part: Part = WHOLE) -> None:
        """Forgets a namespace's index, deletes its snapshot and gives its memory back to
        the system (reachstore_server/query/freed_memory.py). The snapshot goes too: no
        slot here follows the namespace any more, so nothing would rewrite the file when
        a document is deleted or delete it with the namespace, and the deleted text would
        stay on this disk. A later return rebuilds from the store."""
        with self._slots_lock:
            self._forget((namespace_id, part))
        self._path(namespace_id, part).unlink(missing_ok=True)
        freed_memory.give_back()

    def drop_files_except(self, keep: set[SlotKey]) -> int:
        """Deletes the snapshots of indexes this replica neither holds nor is to hold
        (``keep``); returns how many. A member of a sharded tier calls it: a snapshot left
        by an earlier run, or of a partition count the namespace has left, has no slot to
        rewrite it when a document is deleted, so the deleted text would stay on disk."""
        dropped = 0
        for path in self._dir.glob("*.snap"):
            key = _key_of(path.name)
            with self._slots_lock:
                held = key is None or key in keep or key in self._slots
            if not held:
                path.unlink(missing_ok=True)
                dropped += 1
        return dropped

    def _forget(self, key: SlotKey) -> None:
        """Lock held."""
        slot = self._slots.pop(key, None)
        if slot is not None and self._named.get((slot.tenant, slot.name, slot.part)) is slot:
            del self._named[(slot.tenant, slot.name, slot.part)]

    def _load(self, slot: Slot) -> None:
        path = self._path(slot.namespace_id, slot.part)
        try:
            if path.exists():
                try:
                    index, seq = NamespaceIndex.from_snapshot(read_snapshot_file(path))
                    self._install(slot, index, seq, dirty=False)
                    log.info("namespace %s: index loaded from snapshot at seq %d", slot.name, seq)
                    return
                except SnapshotCorrupt as exc:
                    log.warning(
                        "namespace %s: snapshot %s is corrupt (%s); rebuilding from the store",
                        slot.name,
                        path,
                        exc,
                    )
            self._rebuild(slot)
        except Exception:  # noqa: BLE001 - keep the slot answering "rebuilding", retry later
            log.exception("namespace %s: loading the index failed", slot.name)
            with self._slots_lock:
                self._forget((slot.namespace_id, slot.part))

    def _rebuild(self, slot: Slot) -> None:
        slot.state = "rebuilding"
        started = time.monotonic()
        if self._rebuild_delay_s:  # fault injection for drills and tests; 0 in production
            time.sleep(self._rebuild_delay_s)
        heads = self._store.namespace_heads(slot.tenant, [slot.name])
        head = heads.get(slot.name)
        seq = head.change_seq if head is not None and head.id == slot.namespace_id else 0
        index = NamespaceIndex(slot.dimension)
        for document_id, records in _by_document(
            self._store.chunks(slot.tenant, slot.namespace_id), slot.part
        ).items():
            index.upsert_document(document_id, records)
        self._install(slot, index, seq, dirty=True)
        log.info(
            "namespace %s: index rebuilt from the store (%d chunks, %.2fs)",
            slot.name,
            index.chunk_count,
            time.monotonic() - started,
        )

    def _install(self, slot: Slot, index: NamespaceIndex, seq: int, dirty: bool) -> None:
        with slot.lock:
            slot.index, slot.seq, slot.dirty, slot.state = index, seq, dirty, "ready"
        slot.ready.set()

    # --- serving ------------------------------------------------------------------------

    def catch_up(self, slot: Slot, head_seq: int, cancel: CancelToken) -> None:
        """Replays the namespace's changes up to ``head_seq`` into the index (which must be
        ready: callers wait on ``slot.ready`` first)."""
        if slot.seq >= head_seq:
            return
        with slot.lock:
            if slot.seq >= head_seq or slot.index is None:
                return
            changed = self._store.changed_documents(
                slot.tenant, slot.namespace_id, slot.seq, head_seq
            )
            cancel.check()
            part = slot.part
            if part.count > 1:
                changed = {d for d in changed if partition_of(d, part.count) == part.index}
            if len(changed) > FULL_RELOAD_ABOVE:
                fresh = _by_document(self._store.chunks(slot.tenant, slot.namespace_id), part)
            else:
                fresh = _by_document(
                    self._store.chunks(slot.tenant, slot.namespace_id, sorted(changed)), part
                )
            for document_id in changed:
                if document_id in fresh:
                    slot.index.upsert_document(document_id, fresh[document_id])
                else:
                    slot.index.remove_document(document_id)
            slot.seq, slot.dirty = head_seq, True

    def search(
        self,
        slot: Slot,
        query_vector: np.ndarray,
        query_text: str,
        top_k: int,
        metadata_filter: dict[str, str] | None,
        cancel: CancelToken,
        lexical_stats: TermStats | None = None,
    ) -> list:
        # No slot lock: NamespaceIndex lets searches run concurrently with each other and
        # with a catch-up (which holds slot.lock only to serialise writers).
        index = slot.index
        assert index is not None
        # A partition's hits keep their retrievers' scores, to be fused with the others',
        # and its BM25 uses the whole namespace's statistics when the query brought them.
        raw = slot.part.count > 1
        if raw:
            # Deeper than asked: a hit among the namespace's first top_k can rank below a
            # partition's first top_k by the partition's own fusion (measured in
            # bench/bench_partitions.py).
            top_k *= PARTITION_DEPTH
        stats = lexical_stats if raw else None
        return index.search(query_vector, query_text, top_k, metadata_filter, cancel, raw, stats)

    def follow(self, namespaces: Iterable[tuple[str, NamespaceInfo, Part]]) -> int:
        """Replays into every ready index the changes its namespace's row shows it lacks,
        and starts loading namespaces this replica has not seen; returns how many indexes
        moved. Called in the background (reachstore_server/query/main.py) so that a query right
        after a large ingest finds its indexes nearly current: catching up thousands of
        documents on the query's path took longer than its namespaces' budgets, and the
        burst after an ingest came back partial with nothing failed."""
        moved = 0
        for tenant, info, part in namespaces:
            slot = self.slot(tenant, info, part)
            if slot.namespace_id != info.id or not slot.ready.is_set():
                continue
            if slot.seq < info.change_seq:
                self.catch_up(slot, info.change_seq, CancelToken())
                moved += 1
        return moved

    # --- snapshots ----------------------------------------------------------------------

    def write_snapshots(self, live_namespace_ids: set[int] | None = None) -> int:
        """Writes every changed index to disk; forgets namespaces no longer in the store
        and deletes their snapshots, held here or not."""
        written = 0
        with self._slots_lock:
            slots = list(self._slots.values())
        for slot in slots:
            key, path = (slot.namespace_id, slot.part), self._path(slot.namespace_id, slot.part)
            if live_namespace_ids is not None and slot.namespace_id not in live_namespace_ids:
                with self._slots_lock:
                    self._forget(key)
                path.unlink(missing_ok=True)
                continue
            if not slot.dirty or slot.index is None:
                continue
            with slot.lock:
                data, slot.dirty = slot.index.snapshot(slot.seq), False
            write_snapshot_file(path, data)
            with self._slots_lock:
                dropped = self._slots.get(key) is not slot
            if dropped:  # dropped while it was written: the drop's unlink may have come first
                path.unlink(missing_ok=True)
                continue
            written += 1
        if live_namespace_ids is not None:
            for path in self._dir.glob("*.snap"):
                owner = path.name.split(".", 1)[0]  # "12.snap", "12.p3of8.snap"
                if owner.isdigit() and int(owner) not in live_namespace_ids:
                    path.unlink(missing_ok=True)  # a namespace deleted while not held here
        return written
