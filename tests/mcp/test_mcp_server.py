"""`reachstore mcp` end to end: the MCP SDK's own client, over stdio and streamable HTTP,
against a real `reachstore up` whose reach channel posts to a real webhook receiver."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from reachstore import AuthError
from reachstore import Client as Sdk
from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import TRANSPORTS, connect, key_id, write_profile
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- tools per key ----------------------------------------------------------------------------


def test_each_key_is_shown_only_the_tools_its_scopes_and_channels_allow(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], transport: str
) -> None:
    async def names(key: str) -> dict[str, Any]:
        async with connect(transport, system, mcp_url, key) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    agent = run(names(keys["agent"]))
    assert list(agent) == [
        "query",
        "ingest",
        "task_status",
        "reach_status",
        "send_desk",
        "send_hook",
    ]
    assert list(run(names(keys["hook_only"]))) == [
        "query",
        "task_status",
        "reach_status",
        "send_hook",
    ]
    assert list(run(names(keys["reader"]))) == ["query", "task_status"]

    hook = agent["send_hook"]
    assert "Side effect outside reachstore: Opens a ticket in the help desk" in hook.description
    assert hook.input_schema["properties"]["params"]["properties"]["ticket"] == {
        "type": "string",
        "maxLength": 40,
    }
    hints = hook.annotations
    assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (
        False,
        True,
        True,
    )
    assert hints.idempotent_hint is False  # the channel does not declare `idempotent`
    assert agent["query"].annotations.read_only_hint is True
    assert agent["query"].output_schema["properties"]["meta"]["required"][0] == "coverage_ratio"


def test_a_tool_profile_keeps_the_named_tools_in_its_order_up_to_its_limit(
    system: RunningSystem, keys: dict[str, str], tmp_path: Path
) -> None:
    profile = write_profile(
        tmp_path,
        f'[default]\nmax_tools = 2\n[keys."{key_id(keys["agent"])}"]\n'
        'tools = ["send_*", "query", "reach_status", "ingest"]\nmax_tools = 3\n',
    )

    async def names(key: str) -> list[str]:
        async with connect("stdio", system, "", key, "--profile", str(profile)) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            # A tool the profile leaves out cannot be called either.
            with pytest.raises(MCPError, match="unknown tool"):
                await client.call_tool("reach_status", {"task_id": "x"})
            return listed

    assert run(names(keys["agent"])) == ["send_desk", "send_hook", "query"]
    assert run(names(keys["hook_only"])) == ["query", "task_status"]


# --- query --------------------------------------------------------------------------------------


def test_a_partial_query_carries_its_coverage_and_failures_in_structured_content(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], corpus: None, transport: str
) -> None:
    async def ask() -> tuple[Any, Any]:
        async with connect(transport, system, mcp_url, keys["agent"]) as client:
            arguments = {
                "namespaces": ["fast", "slow", "nope"],
                "question": "rivers",
                "timeout_ms": 300,
            }
            partial = await client.call_tool("query", arguments)
            # Only the retryable part missing: the refusal itself is retryable.
            strict = await client.call_tool(
                "query", {**arguments, "namespaces": ["fast", "slow"], "allow_partial": False}
            )
            return partial, strict

    partial, strict = run(ask())
    assert partial.is_error is False
    content = partial.structured_content
    meta = content["meta"]
    assert meta["coverage_ratio"] == pytest.approx(1 / 3)
    assert meta["namespaces_succeeded"] == ["fast"]
    assert [r["namespace"] for r in content["results"]] == ["fast"]
    failed = {f["namespace"]: f for f in meta["namespaces_failed"]}
    slow, nope = failed["slow"], failed["nope"]
    assert (slow["category"], slow["error_code"], slow["retryable"]) == (
        "timeout",
        "NAMESPACE_TIMEOUT",
        True,
    )
    assert slow["retry_after_ms"] > 0
    assert (nope["category"], nope["error_code"], nope["retryable"], nope["retry_after_ms"]) == (
        "permanent",
        "NAMESPACE_UNAVAILABLE",
        False,
        None,
    )
    wait = f"{slow['retry_after_ms'] / 1000:g} s"
    first_line = partial.content[0].text.splitlines()[0]
    assert first_line.startswith(f"1 of 3 namespaces answered; slow timed out, retry after {wait}")
    assert "nope failed (permanent NAMESPACE_UNAVAILABLE), not retryable" in first_line

    # allow_partial false: a whole-request error with the REST API's code and category.
    assert strict.is_error is True
    error = strict.structured_content["error"]
    assert (error["error_code"], error["category"], error["retryable"]) == (
        "INCOMPLETE_RESULT",
        "transient",
        True,
    )
    assert [d["namespace"] for d in error["details"]] == ["slow"]
    assert strict.content[0].text.startswith("refused: INCOMPLETE_RESULT (transient)")


# --- reach --------------------------------------------------------------------------------------


def test_a_reach_tool_called_again_with_the_same_arguments_delivers_once(
    system: RunningSystem,
    mcp_url: str,
    keys: dict[str, str],
    receiver: HttpReceiver,
    transport: str,
) -> None:
    ticket = f"T-{transport}-{time.monotonic_ns()}"
    arguments = {"entity_id": f"order-{ticket}", "params": {"ticket": ticket, "note": "late"}}

    async def send() -> list[Any]:
        async with connect(transport, system, mcp_url, keys["agent"]) as client:
            # Two calls at once (a model repeating itself), then a retry after the first
            # answer, then one through a connection of its own (a reconnect after a
            # transport error).
            results = list(
                await asyncio.gather(
                    client.call_tool("send_hook", {**arguments, "wait_ms": 10_000}),
                    client.call_tool("send_hook", arguments),
                )
            )
            results.append(await client.call_tool("send_hook", arguments))
        async with connect(transport, system, mcp_url, keys["agent"]) as again:
            results.append(await again.call_tool("send_hook", {**arguments, "wait_ms": 10_000}))
        return results

    results = run(send())
    assert all(r.is_error is False for r in results), [r.content for r in results]
    contents = [r.structured_content for r in results]
    assert len({c["action_id"] for c in contents}) == 1
    assert len({c["request_key"] for c in contents}) == 1
    assert len({c["idempotency_key"] for c in contents}) == 1
    assert sum(1 for c in contents if not c["deduplicated"]) == 1
    last = contents[-1]
    assert last["state"] == "succeeded" and last["agent_decision_hint"] == "done"
    assert last["receipt"]["outcome"] == "succeeded" and last["receipt"]["status_code"] == 200
    assert receiver.deliveries_by_field("ticket")[ticket] == 1

    async def status() -> Any:
        async with connect(transport, system, mcp_url, keys["agent"]) as client:
            return await client.call_tool("reach_status", {"task_id": last["task_id"]})

    detail = run(status()).structured_content
    [action] = detail["actions"]
    assert (action["state"], action["idempotency_key"]) == ("succeeded", last["idempotency_key"])
    assert [r["outcome"] for r in action["receipts"]] == ["succeeded"]


def test_an_argument_outside_the_schema_is_refused_with_the_field_named(
    system: RunningSystem,
    mcp_url: str,
    keys: dict[str, str],
    receiver: HttpReceiver,
    transport: str,
) -> None:
    before = receiver.total()

    async def calls() -> list[Any]:
        async with connect(transport, system, mcp_url, keys["agent"]) as client:
            return [
                await client.call_tool(
                    "send_hook", {"entity_id": "o-1", "params": {"ticket": "T" * 41}}
                ),
                await client.call_tool("send_hook", {"params": {"ticket": "T-1"}}),
                await client.call_tool(
                    "query", {"namespaces": ["fast"], "question": "x", "namespace": "fast"}
                ),
                await client.call_tool(
                    "ingest",
                    {"namespace": "fast", "documents": [{"text": "ok"}, {"text": 3}]},
                ),
            ]

    too_long, no_entity, extra, bad_doc = (r.structured_content["error"] for r in run(calls()))
    assert (too_long["error_code"], too_long["category"]) == ("PARAMS_REJECTED", "permanent")
    assert too_long["details"][0]["structured_data"]["field"].endswith("ticket")
    assert (no_entity["error_code"], no_entity["structured_data"]["field"]) == (
        "INVALID_ARGUMENT",
        "entity_id",
    )
    assert extra["structured_data"]["field"] == "namespace"
    assert bad_doc["structured_data"]["field"] == "documents[1].text"
    assert receiver.total() == before


def test_an_expired_key_is_refused_as_auth_on_every_request(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], transport: str
) -> None:
    _wait_until_expired(system, keys["expired"])

    async def attempt() -> tuple[MCPError, Any]:
        async with connect(transport, system, mcp_url, keys["expired"]) as client:
            with pytest.raises(MCPError) as listed:
                await client.list_tools()
            called = await client.call_tool("query", {"namespaces": ["fast"], "question": "x"})
            return listed.value, called

    listed, called = run(attempt())
    assert (listed.data["error_code"], listed.data["category"]) == ("AUTH_KEY_EXPIRED", "auth")
    assert called.is_error is True
    error = called.structured_content["error"]
    assert (error["error_code"], error["category"], error["retryable"]) == (
        "AUTH_KEY_EXPIRED",
        "auth",
        False,
    )


def _wait_until_expired(system: RunningSystem, key: str) -> None:
    """Waits on the key's own answer, not on the clock: until the services refuse it."""
    deadline = time.monotonic() + 30
    with Sdk.local("127.0.0.1", system.grpc_port_base, api_key=key, retries=None) as sdk:
        while True:
            try:
                sdk.current_key()
            except AuthError as exc:
                assert exc.code == "AUTH_KEY_EXPIRED"
                return
            assert time.monotonic() < deadline
            time.sleep(0.1)


# --- a scripted agent ---------------------------------------------------------------------------


async def scripted_agent(client: Any, namespaces: list[str], question: str) -> dict[str, Any]:
    """A fixed policy, no model: ask every namespace; while some failure is retryable, wait
    the longest advised time, ask only those namespaces again with ten times the budget,
    and merge; then report the coverage. It reads structuredContent only, never text."""
    budget_ms = 300
    answered: dict[str, list[dict[str, Any]]] = {}
    missing: dict[str, dict[str, Any]] = {}
    asked = list(namespaces)
    rounds: list[list[str]] = []
    waits_ms: list[int] = []
    while asked and len(rounds) < 3:
        rounds.append(asked)
        result = await client.call_tool(
            "query", {"namespaces": asked, "question": question, "timeout_ms": budget_ms}
        )
        assert result.is_error is False
        content = result.structured_content
        for name in content["meta"]["namespaces_succeeded"]:
            answered[name] = [r for r in content["results"] if r["namespace"] == name]
            missing.pop(name, None)
        for failure in content["meta"]["namespaces_failed"]:
            missing[failure["namespace"]] = failure
        retry = [f for f in missing.values() if f["retryable"]]
        if not retry:
            break
        wait_ms = max(f["retry_after_ms"] or 0 for f in retry)
        waits_ms.append(wait_ms)
        await asyncio.sleep(wait_ms / 1000)
        asked = [f["namespace"] for f in retry]
        budget_ms = min(budget_ms * 10, 10_000)
    return {
        "coverage": len(answered) / len(namespaces),
        "answered": sorted(answered),
        "missing": {name: (f["category"], f["retryable"]) for name, f in missing.items()},
        "rounds": rounds,
        "waits_ms": waits_ms,
    }


def test_a_scripted_agent_retries_only_the_retryable_namespaces_after_the_advised_wait(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], corpus: None, transport: str
) -> None:
    async def agent() -> tuple[dict[str, Any], float]:
        async with connect(transport, system, mcp_url, keys["agent"]) as client:
            started = time.monotonic()
            report = await scripted_agent(client, ["fast", "slow", "nope"], "rivers")
            return report, time.monotonic() - started

    report, elapsed = run(agent())
    assert report["rounds"] == [["fast", "slow", "nope"], ["slow"]]
    assert report["answered"] == ["fast", "slow"]
    assert report["missing"] == {"nope": ("permanent", False)}
    assert report["coverage"] == pytest.approx(2 / 3)
    assert len(report["waits_ms"]) == 1 and report["waits_ms"][0] > 0
    assert elapsed >= report["waits_ms"][0] / 1000
