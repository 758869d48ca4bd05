"""Naming rules for namespaces and document ids, and the request limits, in one place.

The proto comments and the README quote these values; ingest and query both check them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sized

from reachstore_server.common import errors

NAMESPACE_RULE = (
    "1 to 64 characters: lowercase ASCII letters, digits, '-' and '_', starting with a "
    "letter or digit"
)
_NAMESPACE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")

DOCUMENT_ID_RULE = "1 to 128 characters: ASCII letters, digits and '-', '_', '.', ':'"
_DOCUMENT_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_BATCH_DOCUMENTS = 100
MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_METADATA_KEYS = 32
MAX_METADATA_KEY_LEN = 64
MAX_METADATA_VALUE_LEN = 1024
MAX_QUERY_CHARS = 4096
MAX_TOP_K = 100
DEFAULT_TOP_K = 10
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20
# Entries of a query's namespaces list before de-duplication; at most
# REACHSTORE_QUERY_MAX_NAMESPACES of them may be distinct.
MAX_NAMESPACE_ENTRIES = 1000


def check_count(values: Sized, field: str, limit: int, what: str = "entries") -> None:
    """Every list and map of a request has a cap: more entries than ``limit`` is a bad
    request naming the field, the limit and the count, refused before anything is done."""
    if len(values) > limit:
        raise errors.over_limit(errors.INVALID_ARGUMENT, field, what, limit, len(values))


def is_namespace_name(name: str) -> bool:
    return _NAMESPACE_RE.fullmatch(name) is not None


def check_namespace_name(name: str, field: str) -> str:
    if not is_namespace_name(name):
        raise errors.invalid(field, f"must be {NAMESPACE_RULE}", value=name[:80])
    return name


def check_document_id(document_id: str, field: str) -> str:
    if _DOCUMENT_ID_RE.fullmatch(document_id) is None:
        raise errors.invalid(field, f"must be {DOCUMENT_ID_RULE}", value=document_id[:160])
    return document_id


def check_metadata(metadata: Mapping[str, str], field: str) -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise errors.invalid(
            field,
            f"at most {MAX_METADATA_KEYS} keys",
            limit=MAX_METADATA_KEYS,
            actual=len(metadata),
        )
    for key, value in metadata.items():
        if not key or len(key) > MAX_METADATA_KEY_LEN:
            raise errors.invalid(
                f"{field}.{key[:80]}", f"keys must be 1 to {MAX_METADATA_KEY_LEN} characters"
            )
        if len(value) > MAX_METADATA_VALUE_LEN:
            raise errors.invalid(
                f"{field}.{key}",
                f"values must be at most {MAX_METADATA_VALUE_LEN} characters",
                limit=MAX_METADATA_VALUE_LEN,
                actual=len(value),
            )


def page_size(requested: int, field: str = "page_size") -> int:
    if requested < 0 or requested > MAX_PAGE_SIZE:
        raise errors.invalid(
            field, f"must be between 1 and {MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE})"
        )
    return requested or DEFAULT_PAGE_SIZE
