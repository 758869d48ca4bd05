"""The files an ingest reads, the document id each gets, and how they are cut into batches.

A document id comes from the file's path relative to the folder named on the command line
(a file named directly: its name), so the same tree gives the same ids on every run — that
is what lets a rerun recognise what it already stored. Path separators become ``:``; any
other character outside the id rules (README "Ingest") becomes ``_``, and then, because
two different paths could clean up to the same id, a short hash of the path is appended.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from reachstore_server.cli_client.exit_codes import UsageError
from reachstore_server.common.errors import ReachstoreError as RuleBroken
from reachstore_server.common.names import MAX_BATCH_BYTES, MAX_BATCH_DOCUMENTS, check_document_id

SUFFIXES = (".txt", ".md")
MAX_ID_CHARS = 128
_NOT_ID_CHAR = re.compile(r"[^A-Za-z0-9_.:-]")  # the complement of the id rule's characters
HASH_CHARS = 8

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class SourceFile:
    path: Path
    relative: str  # POSIX form, as shown to people and kept in the document's metadata
    document_id: str


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_CHARS]


def _is_document_id(text: str) -> bool:
    try:
        check_document_id(text, "document_id")  # the server's own rule
    except RuleBroken:
        return False
    return True


def document_id(relative: str) -> str:
    joined = relative.replace("/", ":")
    if _is_document_id(joined):
        return joined
    cleaned = _NOT_ID_CHAR.sub("_", joined)[: MAX_ID_CHARS - HASH_CHARS - 1]
    return f"{cleaned}-{_digest(relative)}"


def _walk(folder: Path) -> Iterator[Path]:
    """The .txt and .md files under ``folder``, in a stable order, skipping hidden files
    and folders (.git, editor state, this command's own state files)."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and name.lower().endswith(SUFFIXES):
                yield Path(root) / name


def discover(paths: Sequence[str]) -> list[SourceFile]:
    """Every file to ingest. A file named directly is taken whatever its extension (it was
    asked for); folders contribute their .txt and .md files, recursively."""
    found: list[SourceFile] = []
    seen_paths: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            pairs: Iterable[tuple[Path, str]] = (
                (file, file.relative_to(path).as_posix()) for file in _walk(path)
            )
        elif path.is_file():
            pairs = [(path, path.name)]
        else:
            raise UsageError(f"{given}: no such file or folder")
        for file, relative in pairs:
            resolved = file.resolve()
            if resolved not in seen_paths:  # a file reached through two arguments
                seen_paths.add(resolved)
                found.append(SourceFile(file, relative, document_id(relative)))
    if not found:
        raise UsageError(f"no {' or '.join(SUFFIXES)} files in {', '.join(paths)}")
    return _unique_ids(found)


def _unique_ids(files: list[SourceFile]) -> list[SourceFile]:
    """Two files with one id (``a:b`` and ``a/b``, or the same name in two folders given
    on the command line) would overwrite each other: the later ones get a hash of their
    full path appended, which stays the same from run to run."""
    taken: set[str] = set()
    unique = []
    for file in files:
        doc_id = file.document_id
        if doc_id in taken:
            stem = doc_id[: MAX_ID_CHARS - HASH_CHARS - 1]
            doc_id = f"{stem}-{_digest(str(file.path.resolve()))}"
        taken.add(doc_id)
        unique.append(dataclasses.replace(file, document_id=doc_id))
    return unique


def batches(
    items: Iterable[tuple[T, int]],
    max_documents: int = MAX_BATCH_DOCUMENTS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[list[T]]:
    """Groups (document, bytes of text) into batches of at most ``max_documents`` and
    ``max_bytes`` of text, as the server accepts them. A document larger than the byte cap
    goes alone, and the server's answer says why it cannot be stored."""
    batch: list[T] = []
    size = 0
    for item, item_bytes in items:
        if batch and (len(batch) >= max_documents or size + item_bytes > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item_bytes
    if batch:
        yield batch
