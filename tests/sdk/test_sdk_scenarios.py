"""The scenarios that matter, end to end, through the SDK: a real `reachstore up` with a
slow namespace and a webhook channel posting to a real receiver, driven over the SDK's
gRPC path and over the REST bridge by the same tests (``transport``), plus the async
client over both.

Each transport works on its own entities and namespaces, so the two runs do not see
each other's data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from reachstore import (
    ActionInput,
    AsyncClient,
    AuditEvent,
    AuthError,
    Client,
    NotFoundError,
    PermanentError,
)
from tests.e2e.system import RunningSystem
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e

# The slow namespace needs this long per search; a 300 ms budget times it out, a 4 s one not.
SLOW_MS = 1500
QUESTION = "where do rivers flow?"

_T = TypeVar("_T")


PARAMETERS = (
    'parameters = { type = "object", required = ["ticket"], properties = { '
    'ticket = { type = "string" }, step = { type = "string" } } }'
)


def _config(receiver: HttpReceiver) -> str:
    return f"""
[engine]
workers = 4
lease_s = 5

[channels.hook]
kind = "webhook"
description = "posts to a test receiver"
side_effect = "records the request"
action_types = ["dispatch", "notify"]
idempotency_params = ["ticket", "step"]
window = "day"
receiver_deduplicates = true
{PARAMETERS}

[channels.hook.webhook]
url = "{receiver.url}"
status_url = "{receiver.status_url}"
idempotency_header = true
connect_timeout_s = 1
read_timeout_s = 2
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver(dedupe=True) as peer:
        yield peer


@pytest.fixture(scope="module")
def system(
    tmp_path_factory: pytest.TempPathFactory, receiver: HttpReceiver
) -> Iterator[RunningSystem]:
    folder: Path = tmp_path_factory.mktemp("sdk-scenarios")
    config = folder / "reach.toml"
    config.write_text(_config(receiver))
    running = RunningSystem(
        folder / "data",
        {
            "REACHSTORE_REACH_CONFIG": str(config),
            "REACHSTORE_FAULT_NAMESPACE_DELAY_MS": f"slow={SLOW_MS}",
            # Sign chain heads every second, so a checkpoint exists within the test.
            "REACHSTORE_AUDIT_CHECKPOINT_S": "1",
        },
    )
    running.start()
    yield running
    assert running.stop() == 0, "".join(running.output[-40:])


@pytest.fixture(scope="module")
def corpus(system: RunningSystem) -> None:
    """A fast and a slow namespace, each with one document about rivers."""
    with Client.local(grpc_port_base=system.grpc_port_base, timeout=30) as client:
        for name, text in [
            ("fast", "Rivers flow into the sea."),
            ("slow", "Rivers also flow into lakes."),
        ]:
            client.create_namespace(name)
            task = client.add_document(name, text, document_id=f"{name}-doc")
            assert client.wait_for_task(task).state == "completed"


@pytest.fixture(scope="module", params=["grpc", "rest"])
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _connect(system: RunningSystem, transport: str, api_key: str | None = None) -> Client:
    if transport == "rest":
        return Client.rest(system.http_url, timeout=30, api_key=api_key)
    return Client.local(grpc_port_base=system.grpc_port_base, timeout=30, api_key=api_key)


@pytest.fixture(scope="module")
def client(system: RunningSystem, transport: str, corpus: None) -> Iterator[Client]:
    with _connect(system, transport) as sdk:
        yield sdk


def _eventually(probe: Callable[[], _T | None], timeout: float = 20.0) -> _T:
    """What ``probe`` returns once it returns something, polling (events are shipped to the
    audit service in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.2)


def _dispatch(ticket: str, step: str = "open") -> ActionInput:
    return ActionInput("dispatch", "hook", "dispatch", {"ticket": ticket, "step": step})


# --- a partial query, and completing it -------------------------------------------------------


# A 300 ms budget that the fast namespace must meet: not with other tests loading the machine.
@pytest.mark.alone
def test_a_partial_query_says_what_is_missing_and_retry_failed_completes_it(
    client: Client,
) -> None:
    resp = client.search(["fast", "slow", "nope"], QUESTION, top_k=5, timeout_ms=300)

    assert resp.meta.coverage_ratio == pytest.approx(1 / 3)
    assert [r.namespace for r in resp.results] == ["fast"]
    slow, nope = resp.meta.namespaces_failed
    assert (slow["namespace"], slow["category"], slow["error_code"]) == (
        "slow",
        "timeout",
        "NAMESPACE_TIMEOUT",
    )
    assert slow["retryable"] and slow["retry_after_ms"] > 0
    assert slow.structured_data["timeout_ms"] == 300
    assert (nope.namespace, nope.category, nope.retryable, nope.retry_after_ms) == (
        "nope",
        "permanent",
        False,
        None,
    )

    merged = client.retry_failed(resp, timeout_ms=4000)

    assert merged.meta.namespaces_succeeded == ["fast", "slow"]
    assert merged.meta.coverage_ratio == pytest.approx(2 / 3)
    assert [f.namespace for f in merged.meta.namespaces_failed] == ["nope"]
    assert {r.document_id for r in merged.results} == {"fast-doc", "slow-doc"}

    with pytest.raises(PermanentError) as strict:
        client.search(["fast", "nope"], QUESTION, allow_partial=False)
    assert strict.value.code == "INCOMPLETE_RESULT_PERMANENT"
    assert [d.namespace for d in strict.value.details] == ["nope"]


# --- a batch with failures, then its tasks ---------------------------------------------------


def test_a_batch_with_a_bad_document_and_the_progress_of_its_tasks(
    client: Client, transport: str
) -> None:
    namespace = f"{transport}-batch"
    client.create_namespace(namespace)
    batch = client.add_documents(
        namespace,
        [
            {"document_id": "ok", "text": "Swallows migrate south in autumn."},
            {"document_id": "bad id", "text": "x"},
        ],
    )
    assert batch.meta.coverage_ratio == 0.5
    (failed,) = batch.meta.failed
    assert (failed["batch_index"], failed["category"], failed["retryable"]) == (
        1,
        "permanent",
        False,
    )
    assert batch.results[1].failure == failed and batch.results[1].task_id is None

    accepted = batch.results[0]
    assert accepted.task_id is not None
    task = client.wait_for_task(accepted.task_id)
    assert (task.state, task.agent_decision_hint, task.percent) == (
        "completed",
        "done_fetch_doc",
        100,
    )
    assert client.get_task(accepted.task_id) == task
    assert client.get_document(namespace, "ok").text == "Swallows migrate south in autumn."
    assert [d.document_id for d in client.list_documents(namespace, page_size=1)] == ["ok"]
    assert client.search([namespace], "birds flying south").results[0].document_id == "ok"

    # Problems that depend on stored state show in the task, not in the call.
    duplicate = client.add_document(namespace, "again", document_id="ok")
    ended = client.wait_for_task(duplicate)
    assert ended.state == "failed" and ended.error is not None
    assert (ended.error["error_code"], ended.agent_decision_hint) == (
        "DOCUMENT_EXISTS",
        "inspect_error_code",
    )


# --- reach: submit, wait, look, settle -------------------------------------------------------


def test_reach_submit_and_wait_with_receipts_history_and_deduplication(
    client: Client, transport: str, receiver: HttpReceiver
) -> None:
    (channel,) = [c for c in client.list_channels() if c.name == "hook"]
    assert channel.kind == "webhook" and "dispatch" in channel.action_types
    entity = f"WO-{transport}-1"
    actions = [
        _dispatch(entity),
        {
            "name": "notify",
            "channel": "hook",
            "action_type": "notify",
            "params": {"ticket": entity, "step": "notify"},
            "depends_on": ["dispatch"],
            "requirement": "optional",
        },
    ]
    checked = client.submit_task(entity, actions, validate_only=True)
    assert checked.validated_only and [a.name for a in checked.actions] == ["dispatch", "notify"]

    task = client.submit_task(entity, actions, idempotency_key=f"{entity}/open")
    assert task.state in ("pending", "running") and not task.deduplicated

    done = client.wait_for_reach_task(task, timeout=30)

    assert done.task_id == task.task_id and (done.state, done.done) == ("succeeded", True)
    assert [(a.name, a.state, a.requirement) for a in done.actions] == [
        ("dispatch", "succeeded", "required"),
        ("notify", "succeeded", "optional"),
    ]
    dispatch = client.get_action(done.action("dispatch").action_id)
    assert dispatch.receipts and dispatch.receipts[-1].status_code == 200
    assert dispatch.history and dispatch.history[-1].to_state == "succeeded"
    assert receiver.effects(dispatch.idempotency_key) == 1

    again = client.submit_task(entity, actions, idempotency_key=f"{entity}/open")
    assert again.deduplicated and again.task_id == task.task_id
    assert task.task_id in [t.task_id for t in client.list_reach_tasks(entity_id=entity)]

    one = client.reach(_dispatch(f"WO-{transport}-2"), entity_id=f"WO-{transport}-2")
    assert client.wait_for_reach_task(one, timeout=30).state == "succeeded"

    cancel = client.cancel_action(dispatch.action_id)
    assert not cancel.cancelled and cancel.action.state == "succeeded"
    assert [f.error_code for f in cancel.partial_failures] == ["ACTION_ALREADY_FINISHED"]
    with pytest.raises(PermanentError) as settled:
        client.resolve_action(dispatch.action_id, "failed", "checked the receiver")
    assert settled.value.code == "ACTION_NOT_RESOLVABLE"
    with pytest.raises(NotFoundError) as missing:
        client.get_reach_task("rt-does-not-exist")
    assert missing.value.code == "REACH_TASK_NOT_FOUND"


# --- audit: the trail, verified ----------------------------------------------------------------


def test_the_audit_trail_lists_reads_back_and_verifies(client: Client, transport: str) -> None:
    entity = f"WO-{transport}-audit"
    task = client.submit_task(entity, [_dispatch(entity)], idempotency_key=f"{entity}/k")

    def submitted() -> list[AuditEvent] | None:
        found = list(client.list_events(method="SubmitTask", idempotency_key=f"{entity}/k"))
        return found or None

    (event,) = _eventually(submitted)
    assert (event.service, event.method, event.result_status) == ("reach", "SubmitTask", "ok")
    assert client.get_event(event.event_id) == event
    assert task.task_id

    verified = client.verify_audit()
    assert verified.ok and verified.first_break is None and verified.events_checked > 0
    head = _eventually(client.get_checkpoint)
    assert head.tenant == "default" and head.seq > 0 and head.signature
    ranged = client.verify_audit(from_seq=1, to_seq=head.seq)
    assert ranged.ok and ranged.events_checked == head.seq


# --- keys ----------------------------------------------------------------------------------------


def test_a_key_is_created_used_listed_and_revoked(
    client: Client, system: RunningSystem, transport: str
) -> None:
    created = client.create_key(["read"], name=f"{transport} reader", namespaces=["fast"])
    assert created.secret.startswith("rsk_") and created.secret not in repr(created)
    assert created.key.key_id in [k.key_id for k in client.list_keys(page_size=1)]

    with _connect(system, transport, api_key=created.secret) as reader:
        assert reader.search(["fast"], QUESTION).meta.namespaces_succeeded == ["fast"]
        itself = reader.current_key()
        assert (itself.key_id, itself.scopes, itself.namespaces) == (
            created.key.key_id,
            ["read"],
            ["fast"],
        )
        revoked = client.revoke_key(created.key.key_id)
        assert revoked.revoked
        with pytest.raises(AuthError) as refused:
            reader.search(["fast"], QUESTION)
    assert refused.value.code == "AUTH_KEY_REVOKED"


# --- the async client, over both transports --------------------------------------------------


def test_the_async_client_queries_reaches_and_verifies(
    system: RunningSystem, transport: str, corpus: None
) -> None:
    async def scenario() -> None:
        if transport == "rest":
            client = AsyncClient.rest(system.http_url, timeout=30)
        else:
            client = AsyncClient.local(grpc_port_base=system.grpc_port_base, timeout=30)
        async with client:
            entity = f"WO-{transport}-async"
            resp, task = await asyncio.gather(
                client.search(["fast", "nope"], QUESTION),
                client.submit_task(entity, [_dispatch(entity)], idempotency_key=entity),
            )
            assert resp.meta.coverage_ratio == 0.5
            assert [f["namespace"] for f in resp.meta.namespaces_failed] == ["nope"]
            done = await client.wait_for_reach_task(task, timeout=30)
            assert done.state == "succeeded"
            listed = [t.task_id async for t in client.list_reach_tasks(entity_id=entity)]
            assert listed == [task.task_id]
            assert (await client.verify_audit()).ok

    asyncio.run(scenario())
