"""The resume file of `reachstore ingest`: what happened to each document, so that a rerun
after Ctrl-C, a crash or a fix skips what is stored and follows what is still running.

One JSON object per namespace and system (``.reachstore-ingest-<namespace>.json`` in the
current folder unless ``--state`` names another), rewritten atomically, so a kill at any
moment leaves either the old or the new file, never half of one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from reachstore_server.cli_client.exit_codes import UsageError

FORMAT = 1

# What a record's status means for a rerun.
SUBMITTING = "submitting"  # sent, answer not recorded: look the document up before resending
PENDING = "pending"  # accepted; its task id is followed
COMPLETED = "completed"  # stored
SKIPPED = "skipped"  # on_duplicate=skip kept the version already stored
FAILED = "failed"  # refused or cancelled; resent only when retryable or once the file changed
DONE = frozenset({COMPLETED, SKIPPED})


@dataclasses.dataclass
class Record:
    # SHA-256 of the file's bytes (the server's content_sha256 of the text); None when the
    # file could not be read, so a rerun tries it again.
    sha256: str | None
    status: str
    task_id: str | None = None
    failure: dict[str, Any] | None = None  # the Failure, in the JSON API's shape


FILE_PREFIX = ".reachstore-ingest-"


def default_path(namespace: str) -> Path:
    return Path(f"{FILE_PREFIX}{namespace}.json")


class IngestState:
    def __init__(self, path: Path, namespace: str, target: str) -> None:
        self.path = path
        self.namespace = namespace
        self.target = target
        self.records: dict[str, Record] = {}

    @classmethod
    def read(cls, path: Path) -> IngestState | None:
        """The state file at ``path`` whatever it was written for; None when there is none."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the ingest state {path}: {exc}") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise UsageError(f"{path} is not an ingest state file of this version")
        state = cls(path, str(raw.get("namespace")), str(raw.get("target")))
        try:
            state.records = {
                doc_id: Record(**fields) for doc_id, fields in raw["documents"].items()
            }
        except (KeyError, TypeError, AttributeError):
            raise UsageError(f"{path} is damaged: delete it to start over") from None
        return state

    @classmethod
    def load(cls, path: Path, namespace: str, target: str) -> IngestState:
        """The state at ``path``, or an empty one. A file written for another namespace or
        system is refused rather than trusted: its "completed" would skip documents that
        the system being written to has never seen."""
        state = cls.read(path)
        if state is None:
            return cls(path, namespace, target)
        if (state.namespace, state.target) != (namespace, target):
            raise UsageError(
                f"{path} records an ingest into {state.namespace!r} on {state.target!r}, "
                f"not {namespace!r} on {target!r}: pass --state with another file, or "
                "delete it to start over"
            )
        return state

    def get(self, document_id: str) -> Record | None:
        return self.records.get(document_id)

    def set(self, document_id: str, record: Record) -> None:
        self.records[document_id] = record

    def save(self) -> None:
        body = {
            "format": FORMAT,
            "namespace": self.namespace,
            "target": self.target,
            "documents": {k: dataclasses.asdict(v) for k, v in self.records.items()},
        }
        temporary = self.path.with_name(f"{self.path.name}.tmp")
        temporary.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, self.path)
