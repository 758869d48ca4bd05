"""`reachstore query|ingest|tasks|reach` as a user runs them: subprocesses against a real
`reachstore up` (a slow namespace for partial answers, reach channels pointing at real
local HTTP receivers), judged by exit code, stdout, stderr and the resume file."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reachstore import Client
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SLOW_MS = 5000  # the slow namespace's injected delay; queries give it far less


def _config(ok: HttpReceiver, rejecting: HttpReceiver, silent: HttpReceiver) -> str:
    """Three webhook channels with short times: one that answers 200, one whose receiver
    refuses on the merits (400), and one that never answers and cannot be looked up, so
    its action goes unknown and then to review within a second or two."""

    def hook(name: str, receiver: HttpReceiver) -> str:
        return f"""
[channels.{name}]
kind = "webhook"
description = "{name}: posts to a test receiver"
action_types = ["notify"]
idempotency_params = ["ticket"]
[channels.{name}.webhook]
url = "{receiver.url}"
idempotency_header = false
read_timeout_s = 0.5
[channels.{name}.retry]
base_s = 0.05
cap_s = 0.2
max_retries = 1
[channels.{name}.unknown]
base_s = 0.2
cap_s = 0.5
max_polls = 1
"""

    return (
        "[engine]\nworkers = 4\nlease_s = 5\n"
        + hook("hook", ok)
        + hook("rejecting", rejecting)
        + hook("silent", silent)
    )


@pytest.fixture(scope="module")
def receivers() -> Iterator[dict[str, HttpReceiver]]:
    peers = {
        "ok": HttpReceiver(),
        "rejecting": HttpReceiver(default="status:400"),
        "silent": HttpReceiver(default="hang:3"),
    }
    for peer in peers.values():
        peer.start()
    try:
        yield peers
    finally:
        for peer in peers.values():
            peer.stop()


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receivers: dict[str, HttpReceiver]
) -> Iterator[RunningSystem]:
    folder = tmp_path_factory.mktemp("cli")
    config = folder / "reach.toml"
    config.write_text(_config(receivers["ok"], receivers["rejecting"], receivers["silent"]))
    running = RunningSystem(
        folder / "data",
        {
            "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={SLOW_MS}",
            "REACHSTORE_REACH_CONFIG": str(config),
        },
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's current folder: resume files land here."""
    return tmp_path_factory.mktemp("user")


def cli_args(system: RunningSystem, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "reachstore_server.cli",
        *args,
        "--grpc-port-base",
        str(system.grpc_port_base),
    ]


def cli_env() -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k != "REACHSTORE_API_KEY"},
        "PYTHONPATH": str(ROOT),
    }


def run(system: RunningSystem, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_args(system, *args),
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_json(system: RunningSystem, cwd: Path, *args: str) -> tuple[int, Any]:
    done = run(system, cwd, *args, "--json")
    return done.returncode, json.loads(done.stdout)


def write_corpus(folder: Path, count: int, prefix: str = "note") -> None:
    for i in range(count):
        sub = folder / ("guides" if i % 2 else "faq")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{prefix}-{i}.md").write_text(
            f"Note {i}: refunds for order {1000 + i} reach the card within {i % 7 + 1} days."
        )


def state_file(cwd: Path, namespace: str) -> dict[str, Any]:
    return json.loads((cwd / f".reachstore-ingest-{namespace}.json").read_text())


# --- ingest -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ingested(
    system: RunningSystem, workdir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The namespace kb, ingested from a folder of 30 notes plus two that fail: one over
    the size cap, and one whose id a document stored just before already has (the
    default on_duplicate, error, refuses it as DOCUMENT_EXISTS)."""
    folder = tmp_path_factory.mktemp("corpus")
    corpus = folder / "corpus"
    write_corpus(corpus, 30)
    (corpus / "big.txt").write_text("x" * (1024 * 1024 + 1))  # one byte over the cap
    (corpus / "clash.md").write_text("The version the folder has.")
    (corpus / ".hidden.md").write_text("never read")
    first = folder / "first" / "clash.md"
    first.parent.mkdir()
    first.write_text("The version stored first.")
    setup = run(
        system,
        workdir,
        "ingest",
        str(first),
        "--namespace",
        "kb",
        "--create",
        "--state",
        str(folder / "setup.json"),
    )
    assert setup.returncode == 0, setup.stderr
    return run(system, workdir, "ingest", str(corpus), "--namespace", "kb"), corpus


def test_a_folder_is_ingested_with_failures_summarised_by_code_and_a_rerun_sends_nothing(
    system: RunningSystem,
    workdir: Path,
    tmp_path: Path,
    ingested: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, corpus = ingested
    assert done.returncode == 3, done.stderr
    summary = done.stdout
    assert "kb: 30 of 32 documents stored, 2 failed" in summary
    assert "DOCUMENT_TOO_LARGE (permanent, not retryable) ×1: big.txt" in summary
    assert "DOCUMENT_EXISTS (permanent, not retryable) ×1: clash.md" in summary

    # Ids come from the relative path; the hidden file was not read.
    records = state_file(workdir, "kb")["documents"]
    assert "faq:note-0.md" in records and "guides:note-1.md" in records
    assert len(records) == 32
    assert records["clash.md"]["failure"]["error_code"] == "DOCUMENT_EXISTS"

    code, again = run_json(system, workdir, "ingest", str(corpus), "--namespace", "kb")
    assert code == 3
    assert again["sent"] == 0 and again["stored"] == 30 and again["failed"] == 2
    assert again["finished_earlier"] == 32
    assert set(again["failures_by_code"]) == {"DOCUMENT_TOO_LARGE", "DOCUMENT_EXISTS"}
    assert again["failures_by_code"]["DOCUMENT_TOO_LARGE"]["documents"] == ["big.txt"]

    # Replacing the stored version is a deliberate choice.
    code, fixed = run_json(
        system,
        workdir,
        "ingest",
        str(corpus / "clash.md"),
        "--namespace",
        "kb",
        "--on-duplicate",
        "overwrite",
        "--state",
        str(tmp_path / "fix.json"),
    )
    assert code == 0 and fixed["stored"] == 1 and fixed["sent"] == 1


def test_an_interrupted_ingest_resumes_without_sending_anything_twice(
    system: RunningSystem, workdir: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "many"
    write_corpus(corpus, 150, "item")
    args = cli_args(system, "ingest", str(corpus), "--namespace", "resume", "--create")
    state = workdir / ".reachstore-ingest-resume.json"
    process = subprocess.Popen(
        [*args, "--batch", "10"],
        cwd=workdir,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The resume file is first written just before the first batch is sent: interrupt
    # then, so that some documents are being processed and most are not sent yet.
    deadline = time.monotonic() + 30
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert "run the same command again to resume" in err

    records = state_file(workdir, "resume")["documents"].values()
    accepted = sum(1 for r in records if r["status"] in ("pending", "completed"))
    assert accepted < 150, "the interrupt came too late to test resuming"

    code, resumed = run_json(system, workdir, "ingest", str(corpus), "--namespace", "resume")
    assert code == 0, resumed
    assert resumed["stored"] == 150 and resumed["failed"] == 0
    assert resumed["sent"] == 150 - accepted  # the accepted ones were followed, not resent


def test_progress_is_a_bar_on_a_terminal(
    system: RunningSystem, workdir: Path, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "few", 6)
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            cli_args(system, "ingest", str(tmp_path / "few"), "--namespace", "bar", "--create"),
            cwd=workdir,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            timeout=60,
        )
        drawn = b""
        while select.select([controller], [], [], 0.2)[0]:
            drawn += os.read(controller, 65536)
    finally:
        os.close(controller)
        os.close(terminal)
    assert done.returncode == 0
    assert b"\r[" in drawn and b"documents/s" in drawn and b"ETA" in drawn
    assert b"6/6 documents" in drawn


def test_usage_errors_exit_2_before_anything_is_sent(system: RunningSystem, workdir: Path) -> None:
    missing = run(system, workdir, "ingest", "no-such-folder", "--namespace", "kb")
    assert missing.returncode == 2 and "no-such-folder: no such file or folder" in missing.stderr
    bad_name = run(system, workdir, "ingest", ".", "--namespace", "Bad Name")
    assert bad_name.returncode == 2 and "--namespace" in bad_name.stderr
    bad_json = run(system, workdir, "reach", "submit", "--entity", "E", "--action", "{oops")
    assert bad_json.returncode == 2 and "--action: not JSON" in bad_json.stderr
    no_flag = run(system, workdir, "query")
    assert no_flag.returncode == 2


# --- query ------------------------------------------------------------------------------------


def test_a_complete_query(
    system: RunningSystem,
    workdir: Path,
    ingested: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done = run(
        system, workdir, "query", "kb,demo", "when do refunds reach the card?", "--top-k", "3"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(" 1. ")
    assert any(line.startswith(" 2. ") for line in lines)
    assert any("  kb  " in line for line in lines)
    assert lines[-1] == "coverage 2/2 namespaces — complete"

    code, body = run_json(system, workdir, "query", "kb", "refunds", "--top-k", "2")
    assert code == 0
    assert body["meta"]["coverage_ratio"] == 1.0 and len(body["results"]) == 2
    assert {"score", "namespace", "document_id", "text"} <= set(body["results"][0])


def test_a_partial_query_names_what_is_missing_and_exits_3(
    system: RunningSystem, workdir: Path, tmp_path: Path
) -> None:
    (tmp_path / "slow.txt").write_text("A namespace that answers late.")
    made = run(
        system, workdir, "ingest", str(tmp_path / "slow.txt"), "--namespace", "slow", "--create"
    )
    assert made.returncode == 0, made.stderr

    done = run(system, workdir, "query", "kb,slow,nope", "refunds", "--timeout-ms", "300")
    assert done.returncode == 3, done.stderr
    coverage = done.stdout.splitlines()[-1]
    assert coverage.startswith("coverage 1/3 namespaces — missing: ")
    assert "slow (timeout NAMESPACE_TIMEOUT, retry after 1000 ms)" in coverage
    assert "nope (permanent NAMESPACE_UNAVAILABLE, not retryable)" in coverage

    code, body = run_json(system, workdir, "query", "slow,nope", "x", "--timeout-ms", "300")
    assert code == 1  # no namespace answered: nothing worked
    assert body["meta"]["coverage_ratio"] == 0
    assert {f["category"] for f in body["meta"]["namespaces_failed"]} == {"timeout", "permanent"}


def test_a_refused_request_exits_1_with_one_line_on_stderr(
    system: RunningSystem, workdir: Path
) -> None:
    done = run(system, workdir, "query", "kb", "refunds", "--top-k", "500")
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("reachstore: INVALID_ARGUMENT (permanent): top_k")
    assert line.endswith("; not retryable")

    code, body = run_json(system, workdir, "reach", "get", "0" * 32)
    assert code == 1 and body["error"]["error_code"] == "REACH_TASK_NOT_FOUND"


# --- tasks ------------------------------------------------------------------------------------


def test_tasks_list_and_watch(
    system: RunningSystem,
    workdir: Path,
    ingested: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    records = state_file(workdir, "kb")["documents"]
    completed = [r["task_id"] for r in records.values() if r["status"] == "completed"][:2]
    # A single upload of an id that is stored fails in its task.
    with Client.local(grpc_port_base=system.grpc_port_base) as client:
        failed = client.add_document("kb", "again", document_id="faq:note-0.md").task_id

    done = run(system, workdir, "tasks", "watch", *completed)
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines()] == ["completed"] * 2

    watched = run(system, workdir, "tasks", "watch", completed[0], failed)
    assert watched.returncode == 3
    assert "DOCUMENT_EXISTS (permanent)" in watched.stdout

    code, body = run_json(system, workdir, "tasks", "list", completed[0], "f" * 32)
    assert code == 3  # one was not found
    assert body["tasks"][0]["state"] == "completed" and body["not_found"] == ["f" * 32]


# --- reach ------------------------------------------------------------------------------------


def notify(channel: str, ticket: str) -> str:
    return json.dumps(
        {
            "name": "notify",
            "channel": channel,
            "action_type": "notify",
            "params": {"ticket": ticket},
        }
    )


def test_reach_submit_wait_succeeds(
    system: RunningSystem, workdir: Path, receivers: dict[str, HttpReceiver]
) -> None:
    done = run(
        system,
        workdir,
        "reach",
        "submit",
        "--entity",
        "WO-1",
        "--action",
        notify("hook", "WO-1"),
        "--wait",
    )
    assert done.returncode == 0, done.stderr
    assert ": succeeded (entity WO-1, 1 action" in done.stdout.splitlines()[0]
    assert receivers["ok"].total() == 1

    # The same submission again is the same task, not a second delivery.
    code, body = run_json(
        system, workdir, "reach", "submit", "--entity", "WO-1", "--action", notify("hook", "WO-1")
    )
    assert code == 0 and body["deduplicated"] is True
    assert receivers["ok"].total() == 1
    code, got = run_json(system, workdir, "reach", "get", body["task_id"])
    assert code == 0 and got["state"] == "succeeded"


def test_reach_validate_only_reserves_nothing(system: RunningSystem, workdir: Path) -> None:
    task = {"entity_id": "WO-2", "actions": [json.loads(notify("hook", "WO-2"))]}
    done = subprocess.run(
        cli_args(system, "reach", "submit", "--file", "-", "--validate-only"),
        input=json.dumps(task),
        cwd=workdir,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("valid: nothing reserved")


def test_a_failed_reach_task_exits_3_with_its_code(system: RunningSystem, workdir: Path) -> None:
    done = run(
        system,
        workdir,
        "reach",
        "submit",
        "--entity",
        "WO-3",
        "--action",
        notify("rejecting", "WO-3"),
        "--wait",
    )
    assert done.returncode == 3, done.stderr
    assert ": failed (entity WO-3" in done.stdout
    assert "RECEIVER_REJECTED (permanent, business, not retryable)" in done.stdout


def test_an_action_under_review_is_resolved_by_an_operator(
    system: RunningSystem, workdir: Path
) -> None:
    code, task = run_json(
        system,
        workdir,
        "reach",
        "submit",
        "--entity",
        "WO-4",
        "--action",
        notify("silent", "WO-4"),
        "--wait",
    )
    assert code == 3  # waits for a person
    [action] = task["actions"]
    assert action["state"] == "needs_review"

    done = run(
        system,
        workdir,
        "reach",
        "resolve",
        action["action_id"],
        "--outcome",
        "succeeded",
        "--note",
        "the receiver shows it",
    )
    assert done.returncode == 0, done.stderr
    assert "resolved succeeded: the receiver shows it" in done.stdout

    got = run(system, workdir, "reach", "get", task["task_id"], "--wait")
    assert got.returncode == 0 and ": succeeded" in got.stdout
    history = run(system, workdir, "reach", "action", action["action_id"])
    assert "ambiguous_outcome" in history.stdout and "resolved_succeeded" in history.stdout


def test_a_channel_that_does_not_exist_is_refused(system: RunningSystem, workdir: Path) -> None:
    done = run(
        system, workdir, "reach", "submit", "--entity", "WO-5", "--action", notify("nope", "WO-5")
    )
    assert done.returncode == 1
    assert done.stderr.startswith("reachstore: CHANNEL_NOT_ALLOWED (auth): ")
    code, body = run_json(system, workdir, "reach", "channels")
    assert code == 0
    assert {c["name"] for c in body["channels"]} == {"hook", "rejecting", "silent"}
