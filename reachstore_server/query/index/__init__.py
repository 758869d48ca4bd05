"""Per-namespace in-memory search index of the query service (pure domain logic).

Dense vectors (faiss, exact below a size threshold, HNSW above) plus BM25 over a
dictionary-free multilingual tokenizer, fused by reciprocal rank fusion; cooperative
cancellation; checksummed binary snapshots; cross-namespace merge.

Call :func:`configure_threads` once at service start-up (one OpenMP thread per worker).
"""

from .cancel import CancelToken, SearchCancelled
from .dense import EF_SEARCH, HNSW_THRESHOLD, DenseIndex, configure_threads
from .lexical import LexicalIndex, TermStats
from .merge import merge_hits
from .namespace_index import RRF_K, NamespaceIndex, candidate_count
from .records import ChunkRecord, Hit, PartitionHits
from .snapshot import SnapshotCorrupt, read_snapshot_file, write_snapshot_file
from .tokenize import tokenize

__all__ = [
    "PartitionHits",
    "TermStats",
    "CancelToken",
    "ChunkRecord",
    "DenseIndex",
    "EF_SEARCH",
    "HNSW_THRESHOLD",
    "Hit",
    "LexicalIndex",
    "NamespaceIndex",
    "RRF_K",
    "SearchCancelled",
    "SnapshotCorrupt",
    "candidate_count",
    "configure_threads",
    "merge_hits",
    "read_snapshot_file",
    "tokenize",
    "write_snapshot_file",
]
