"""`reachstore ingest PATH... --namespace NS`: files and folders into a namespace, in
batches, following every task to its end, with a summary of what failed and why.

Resuming: every document's fate is kept in a state file (see ``ingest_state``). A rerun
of the same command sends nothing that is stored or still being processed: it follows
the task ids it recorded, resends only what failed in a way worth retrying (a retryable
failure, or a file that changed since), and reports permanent failures and cancelled
tasks again without resending them, since the same bytes would fail the same way and a
cancel was someone's decision.

Duplicates: ``--on-duplicate`` is passed through and defaults to the API's ``error``, so
an id stored by someone else (or by a run with another state file) is never replaced
silently: it fails as DOCUMENT_EXISTS and the summary lists it; ``overwrite`` replaces,
``skip`` keeps the stored version. The command's own earlier work never collides with
it, because what the state file records as stored is not sent again.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reachstore import (
    AlreadyExistsError,
    BatchResponse,
    Client,
    DocumentInput,
    Failure,
    NotFoundError,
    PermanentError,
    QuotaError,
    ReachstoreError,
    Task,
)
from reachstore_server.cli_client import exit_codes
from reachstore_server.cli_client import ingest_state as st
from reachstore_server.cli_client.connection import client_command, positive_int, wrapped
from reachstore_server.cli_client.ingest_files import SourceFile, batches, discover
from reachstore_server.cli_client.output import (
    Progress,
    clean,
    note,
    plural,
    print_json,
    retry_advice,
    say,
)
from reachstore_server.cli_client.tasks import TaskPoller
from reachstore_server.common.names import MAX_BATCH_DOCUMENTS, NAMESPACE_RULE, is_namespace_name

# Documents accepted but not yet finished before the next batch waits: enough to keep the
# ingest service busy, few enough that progress and Ctrl-C stay close to the truth.
MAX_IN_FLIGHT = 1000
METADATA_PATH_KEY = "path"
MAX_METADATA_VALUE = 1024
# Failures the command itself reports, in the same shape as the server's.
FILE_UNREADABLE = "FILE_UNREADABLE"
FILE_NOT_UTF8 = "FILE_NOT_UTF8"
TASK_CANCELLED = "TASK_CANCELLED"
# Names listed per error code in the text summary; --json lists all.
SHOWN_PER_CODE = 5


@dataclasses.dataclass(frozen=True)
class Loaded:
    file: SourceFile
    text: str
    sha256: str


def local_failure(file: SourceFile, code: str, message: str) -> Failure:
    return Failure(
        category="permanent",
        error_code=code,
        message=message,
        retryable=False,
        retry_after_ms=None,
        document_id=file.document_id,
    )


def load(file: SourceFile) -> Loaded | Failure:
    try:
        data = file.path.read_bytes()
    except OSError as exc:
        return local_failure(file, FILE_UNREADABLE, f"{file.relative}: {exc.strerror}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return local_failure(file, FILE_NOT_UTF8, f"{file.relative}: not UTF-8 ({exc.reason})")
    # The bytes are the text's UTF-8, so this is the server's content_sha256 of it.
    return Loaded(file, text, hashlib.sha256(data).hexdigest())


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C waits until the block ends: once the server accepted a batch, its task ids
    must reach the state file, or a rerun could not tell what was sent. A second Ctrl-C
    stops at once (the rerun then looks the documents up)."""
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class Ingest:
    """One run of the command: plans from the state file, then submits and follows."""

    def __init__(self, args: argparse.Namespace, client: Client, state: st.IngestState) -> None:
        self.args = args
        self.client = client
        self.state = state
        self.namespace: str = args.namespace
        self.files = discover(args.paths)
        self.by_id = {f.document_id: f for f in self.files}
        self.to_send: collections.deque[SourceFile] = collections.deque()
        self.poller = TaskPoller(client, in_order=True)
        self.task_documents: dict[str, str] = {}
        self.earlier = 0  # finished in an earlier run, as the state file says
        self.sent = 0
        self.started = time.monotonic()
        self._batches: Iterator[list[Loaded]] | None = None

    # --- the plan --------------------------------------------------------------------------

    def plan(self) -> None:
        """Sorts every file by what its record says: nothing to do, follow its task, look
        it up, or send it."""
        for file in self.files:
            record = self.state.get(file.document_id)
            if record is None:
                self.to_send.append(file)
                continue
            loaded = load(file)
            current = loaded.sha256 if isinstance(loaded, Loaded) else None
            if current is None or current != record.sha256:
                self.to_send.append(file)  # new content (or unreadable now): send it
            elif record.status in st.DONE:
                self.earlier += 1
            elif record.status == st.FAILED and not (record.failure or {}).get("retryable"):
                self.earlier += 1  # the same bytes would fail the same way; reported again
            elif record.status == st.PENDING and record.task_id:
                self._follow(record.task_id, file.document_id)
            elif record.status == st.SUBMITTING:
                self._look_up(file, current)
            else:  # a retryable failure
                self.to_send.append(file)

    def _follow(self, task_id: str, document_id: str) -> None:
        self.task_documents[task_id] = document_id
        self.poller.add(task_id)

    def _look_up(self, file: SourceFile, sha256: str | None) -> None:
        """A document sent without its answer recorded (the command was killed, or the
        task is unknown to the server): stored with these very bytes counts as done;
        anything else is sent again. (A copy accepted by the lost call but still queued
        cannot be seen yet; with on_duplicate=error the second copy then fails as
        DOCUMENT_EXISTS while the first stores the same text. Only a kill during a send
        leaves that window: Ctrl-C waits for the answer.)"""
        try:
            stored = self.client.get_document(self.namespace, file.document_id)
        except NotFoundError:
            stored = None
        if stored is not None and stored.content_sha256 == sha256:
            self.state.set(file.document_id, st.Record(sha256, st.COMPLETED))
        else:
            self.to_send.append(file)

    # --- sending -------------------------------------------------------------------------

    def _loaded_to_send(self) -> Iterator[tuple[Loaded, int]]:
        while self.to_send:
            file = self.to_send.popleft()
            loaded = load(file)
            if isinstance(loaded, Failure):
                self._fail(file.document_id, None, loaded)
            else:
                yield loaded, len(loaded.text.encode("utf-8"))

    def _next_batch(self) -> list[Loaded] | None:
        # Documents can join the queue after the batching generator ran dry (a task the
        # server no longer knows): a fresh generator picks them up.
        if self._batches is None:
            self._batches = batches(self._loaded_to_send(), self.args.batch)
        batch = next(self._batches, None)
        if batch is None:
            self._batches = None
        return batch

    def _send(self, batch: list[Loaded]) -> None:
        for item in batch:
            self.state.set(item.file.document_id, st.Record(item.sha256, st.SUBMITTING))
        self.state.save()
        documents = [
            DocumentInput(
                text=item.text,
                document_id=item.file.document_id,
                metadata={METADATA_PATH_KEY: item.file.relative[:MAX_METADATA_VALUE]},
            )
            for item in batch
        ]
        while True:
            try:
                with interrupts_deferred():
                    response = self.client.add_documents(
                        self.namespace, documents, self.args.on_duplicate
                    )
                    self._record(batch, response)
                    self.state.save()
                break
            except QuotaError as exc:
                if exc.retryable:  # a call-rate limit: nothing of the batch was accepted
                    time.sleep((exc.retry_after_ms or 1000) / 1000)
                    continue
                self._fail_batch(batch, exc.failure)
                break
            except PermanentError as exc:
                # The batch as a whole was refused for what it holds (one file over the
                # batch's byte cap): its documents failed, the others may still go.
                self._fail_batch(batch, exc.failure)
                break
        self.sent += len(batch)

    def _record(self, batch: list[Loaded], response: BatchResponse) -> None:
        for result in response.results:
            item = batch[result.batch_index]
            doc_id = item.file.document_id
            if result.outcome == "accepted" and result.task_id:
                self.state.set(doc_id, st.Record(item.sha256, st.PENDING, result.task_id))
                self._follow(result.task_id, doc_id)
            elif result.outcome == "skipped":
                self.state.set(doc_id, st.Record(item.sha256, st.SKIPPED))
            else:
                failure = result.failure or _unexplained(result.outcome)
                self._fail(doc_id, item.sha256, failure)

    def _fail_batch(self, batch: list[Loaded], failure: Failure) -> None:
        for item in batch:
            self._fail(item.file.document_id, item.sha256, failure)
        self.state.save()

    def _fail(
        self, doc_id: str, sha256: str | None, failure: Failure, task_id: str | None = None
    ) -> None:
        failure = dataclasses.replace(failure, document_id=doc_id)
        self.state.set(doc_id, st.Record(sha256, st.FAILED, task_id, failure.to_dict()))

    # --- following ----------------------------------------------------------------------

    def _finished(self, task: Task) -> None:
        doc_id = self.task_documents.pop(task.task_id)
        record = self.state.get(doc_id)
        sha256 = record.sha256 if record else None
        if task.state == "completed":
            self.state.set(doc_id, st.Record(sha256, st.COMPLETED, task.task_id))
            return
        if task.state == "cancelled":
            # Someone stopped it on purpose: a rerun does not undo that (a changed file
            # is sent again, like any other).
            message = f"task {task.task_id} was cancelled"
            failure = local_failure(self.by_id[doc_id], TASK_CANCELLED, message)
        else:
            failure = task.error or _unexplained(task.state)
        self._fail(doc_id, sha256, failure, task.task_id)

    def _lost(self, task_id: str) -> None:
        doc_id = self.task_documents.pop(task_id)
        record = self.state.get(doc_id)
        self._look_up(self.by_id[doc_id], record.sha256 if record else None)

    def run(self, progress: Progress) -> None:
        """Sends batches while fewer than MAX_IN_FLIGHT documents are being processed and
        follows their tasks, until every document has an outcome."""
        while True:
            if len(self.poller) and time.monotonic() >= self.poller.next_poll:
                finished, lost = self.poller.poll()
                for task in finished:
                    self._finished(task)
                for task_id in lost:
                    self._lost(task_id)
                if finished or lost:
                    self.state.save()
            elif len(self.poller) < MAX_IN_FLIGHT and (batch := self._next_batch()):
                self._send(batch)
            elif len(self.poller):
                self.poller.wait()
            else:
                break
            if progress.due():  # counting walks every record: only when it is shown
                progress.update(*self._progress())
        progress.finish(*self._progress())

    def _progress(self) -> tuple[int, str]:
        failed = self.counts()[st.FAILED]
        return self.finished_count(), f"{failed} failed" if failed else ""

    # --- the outcome ----------------------------------------------------------------------

    def records(self) -> list[tuple[SourceFile, st.Record | None]]:
        return [(f, self.state.get(f.document_id)) for f in self.files]

    def counts(self) -> dict[str, int]:
        counted = collections.Counter(r.status if r else "unsent" for _, r in self.records())
        return {key: counted[key] for key in (st.COMPLETED, st.SKIPPED, st.FAILED, st.PENDING)}

    def finished_count(self) -> int:
        counts = self.counts()
        return counts[st.COMPLETED] + counts[st.SKIPPED] + counts[st.FAILED]

    def failures(self) -> list[dict[str, Any]]:
        return [
            {**record.failure, "path": file.relative}
            for file, record in self.records()
            if record and record.status == st.FAILED and record.failure
        ]

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        failures = self.failures()
        by_code: dict[str, dict[str, Any]] = {}
        for failure in failures:
            group = by_code.setdefault(
                failure["error_code"],
                {
                    "category": failure["category"],
                    "retryable": failure["retryable"],
                    "retry_after_ms": failure["retry_after_ms"],
                    "message": failure["message"],
                    "documents": [],
                },
            )
            group["documents"].append(failure["path"])
        return {
            "namespace": self.namespace,
            "documents": len(self.files),
            "stored": counts[st.COMPLETED],
            "skipped": counts[st.SKIPPED],
            "failed": len(failures),
            "sent": self.sent,
            "finished_earlier": self.earlier,
            "seconds": round(time.monotonic() - self.started, 3),
            "state_file": str(self.state.path),
            "failures_by_code": by_code,
            "failures": failures,
        }


def _unexplained(what: str) -> Failure:
    """A failed outcome the server gave no failure for (it always should): worth a retry."""
    return Failure(
        category="transient",
        error_code="UNKNOWN_OUTCOME",
        message=f"the server reported {what} without a reason",
        retryable=True,
        retry_after_ms=None,
    )


def print_summary(summary: dict[str, Any]) -> None:
    parts = [
        f"{summary['stored']} of {plural(summary['documents'], 'document')} stored",
        f"{summary['skipped']} kept as stored (on_duplicate skip)" if summary["skipped"] else "",
        f"{summary['failed']} failed",
        f"{summary['sent']} sent in {summary['seconds']:.1f} s",
        f"{summary['finished_earlier']} finished in an earlier run"
        if summary["finished_earlier"]
        else "",
    ]
    say(f"{summary['namespace']}: " + ", ".join(p for p in parts if p))
    for code, group in summary["failures_by_code"].items():
        names = [clean(p) for p in group["documents"][:SHOWN_PER_CODE]]
        more = len(group["documents"]) - len(names)
        listed = ", ".join(names) + (f" and {more} more" if more else "")
        say(
            f"  {code} ({group['category']}, {retry_advice(group)}) "
            f"×{len(group['documents'])}: {listed} — {clean(group['message'])}"
        )
    if summary["failed"]:
        say(f"state: {summary['state_file']} (run the same command again to resume and retry)")


def _ensure_namespace(client: Client, namespace: str, create: bool) -> None:
    if create:
        with contextlib.suppress(AlreadyExistsError):
            client.create_namespace(namespace)
        return
    try:
        client.get_namespace(namespace)
    except NotFoundError:
        note(f"namespace {namespace!r} not found: pass --create to create it")
        raise


def cmd_ingest(args: argparse.Namespace, client: Client) -> int:
    if not is_namespace_name(args.namespace):
        raise exit_codes.UsageError(f"--namespace {args.namespace!r}: must be {NAMESPACE_RULE}")
    target = f"{args.host}:{args.grpc_port_base}"
    path = Path(args.state) if args.state else st.default_path(args.namespace)
    state = st.IngestState.load(path, args.namespace, target)
    ingest = Ingest(args, client, state)
    _ensure_namespace(client, args.namespace, args.create)
    ingest.plan()
    progress = Progress(len(ingest.files), "documents", done=ingest.finished_count())
    try:
        ingest.run(progress)
    except KeyboardInterrupt:
        state.save()
        progress.clear()
        pending = ingest.counts()[st.PENDING]
        unsent = len(ingest.files) - ingest.finished_count() - pending
        note(
            f"interrupted with {pending} documents being processed and {unsent} not sent; "
            f"run the same command again to resume ({path})"
        )
        return exit_codes.INTERRUPTED
    except ReachstoreError:
        state.save()
        progress.clear()
        note(f"stopped; what was done is kept in {path}: run the same command again to resume")
        raise
    state.save()
    summary = ingest.summary()
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
    return exit_codes.outcome(summary["stored"] + summary["skipped"], summary["failed"])


def add_ingest_parser(
    commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]
) -> None:
    ingest = commands.add_parser(
        "ingest",
        parents=parents,
        help="store files and folders (.txt, .md) in a namespace, resumably",
        description=wrapped(
            "Reads the files named and the .txt and .md files under the folders "
            "named (hidden ones skipped), sends them in batches and follows every task to its "
            "end. Each document's id is its path relative to the folder given, with '/' as ':' "
            "(characters outside the id rules become '_' plus a short hash of the path). "
            "Progress goes to stderr; the summary lists failures by error code. Run the same "
            "command again after Ctrl-C or a failure: it sends nothing already stored or still "
            "being processed, and retries only what can succeed now."
        ),
        epilog=exit_codes.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="files and folders")
    ingest.add_argument("--namespace", required=True, help="the namespace to store into")
    ingest.add_argument("--create", action="store_true", help="create the namespace if missing")
    ingest.add_argument(
        "--on-duplicate",
        choices=("error", "skip", "overwrite"),
        default="error",
        help="when a document id is already stored: fail it with DOCUMENT_EXISTS (default), "
        "keep the stored version, or replace it",
    )
    ingest.add_argument(
        "--batch",
        type=_batch_size,
        default=MAX_BATCH_DOCUMENTS,
        help=f"documents per batch (1-{MAX_BATCH_DOCUMENTS}; batches also stay under 16 MiB)",
    )
    ingest.add_argument(
        "--state",
        default=None,
        help="the resume file (default: .reachstore-ingest-NAMESPACE.json here)",
    )
    ingest.set_defaults(func=client_command(cmd_ingest))


def _batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_DOCUMENTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_BATCH_DOCUMENTS}, got {value}")
    return value
