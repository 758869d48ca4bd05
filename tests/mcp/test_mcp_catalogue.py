"""The MCP server's pure parts, without a network: which tools a key is shown, how an
argument outside a schema is named, the derived idempotency key and the coverage line."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from reachstore import ApiKey, Channel, Failure
from reachstore_server.mcp import catalogue, keying, shapes
from reachstore_server.mcp.catalogue import ArgumentError, ToolProfile

UTC = dt.UTC


def _key(*scopes: str, key_id: str = "k1") -> ApiKey:
    return ApiKey(key_id, "acme", "", list(scopes), [], [], [], "", "", "")


def _channel(name: str) -> Channel:
    return Channel(
        name=name,
        kind="webhook",
        description=f"{name} channel",
        side_effect="Posts to the desk.",
        action_types=["open", "close"],
        parameters_schema={"type": "object", "required": ["ticket"]},
        rules=["ticket must be known"],
        idempotent=False,
        honours_idempotency_key=True,
        can_poll=False,
        can_cancel=False,
        send_rate_per_second=0.0,
        breaker_state="closed",
    )


def _names(key: ApiKey, profile: ToolProfile | None = None) -> list[str]:
    channels = [_channel("b"), _channel("a")]
    return [t.name for t in catalogue.tools_for(key, channels, profile or ToolProfile())]


def test_a_key_is_shown_the_tools_its_scopes_allow() -> None:
    assert _names(_key("read", "write", "reach")) == [
        "query",
        "ingest",
        "task_status",
        "reach_status",
        "send_a",
        "send_b",
    ]
    assert _names(_key("read")) == ["query", "task_status"]
    assert _names(_key("write")) == ["ingest"]
    assert _names(_key("reach")) == []  # a reach tool reads back what it reserved


def test_a_profile_keeps_its_tools_in_its_order_and_no_more_than_its_limit() -> None:
    every = _key("read", "write", "reach")
    assert _names(every, ToolProfile(("send_*", "query"), None)) == ["send_a", "send_b", "query"]
    assert _names(every, ToolProfile(None, 2)) == ["query", "ingest"]
    # A profile never adds what the scopes leave out.
    assert _names(_key("read"), ToolProfile(("ingest", "query"), 5)) == ["query"]


def test_profiles_are_read_per_key_with_a_default(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[default]\ntools = ["query"]\n[keys.k2]\nmax_tools = 2\n')
    profiles = catalogue.load_profiles(path, max_tools=4)
    assert profiles.of("k1") == ToolProfile(("query",), 4)
    assert profiles.of("k2") == ToolProfile(None, 2)
    path.write_text("[default]\nmax_tools = 0\n")
    with pytest.raises(catalogue.ProfileError, match="default.max_tools"):
        catalogue.load_profiles(path)


def test_a_channel_tool_states_its_side_effect_and_takes_the_channels_schema() -> None:
    spec = catalogue.channel_tool(_channel("desk"))
    assert "Side effect outside reachstore: Posts to the desk." in (spec.tool.description or "")
    schema = spec.tool.input_schema
    assert schema["properties"]["params"] == {"type": "object", "required": ["ticket"]}
    assert schema["required"] == ["entity_id", "params", "action_type"]
    assert spec.tool.annotations is not None and spec.tool.annotations.open_world_hint is True


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"question": "x"}, "namespaces"),
        ({"namespaces": ["a"], "question": "x", "top_k": 0}, "top_k"),
        ({"namespaces": ["a", 3], "question": "x"}, "namespaces[1]"),
        ({"namespaces": ["a"], "question": "x", "namespace": "a"}, "namespace"),
    ],
)
def test_an_argument_outside_the_schema_is_named(arguments: dict[str, object], field: str) -> None:
    with pytest.raises(ArgumentError) as refused:
        catalogue.check_arguments(catalogue.QUERY_INPUT, arguments)
    assert refused.value.field == field


SECRET = "rsk_0123456789abcdef_" + "s" * 32


def test_the_derived_key_depends_on_the_intent_and_the_day_only() -> None:
    noon = dt.datetime(2026, 5, 17, 12, 0, tzinfo=UTC)
    args = {"entity_id": "o-1", "action_type": "open", "params": {"b": 1, "a": 2}}
    key, previous = keying.keys_for(SECRET, "acme", "k1", "send_desk", args, noon)
    assert previous is None and key.startswith("mcp-")
    reordered = {
        "params": {"a": 2, "b": 1},
        "wait_ms": 5000,
        "action_type": "open",
        "entity_id": "o-1",
    }
    assert keying.keys_for(SECRET, "acme", "k1", "send_desk", reordered, noon)[0] == key
    assert keying.keys_for(SECRET, "acme", "k2", "send_desk", args, noon)[0] != key
    other_entity = {**args, "entity_id": "o-2"}
    assert keying.keys_for(SECRET, "acme", "k1", "send_desk", other_entity, noon)[0] != key
    tomorrow = noon + dt.timedelta(days=1)
    assert keying.keys_for(SECRET, "acme", "k1", "send_desk", args, tomorrow)[0] != key
    # Keyed by the caller's secret: without it, no one else can compute the key.
    assert keying.keys_for("other", "acme", "k1", "send_desk", args, noon)[0] != key


def test_just_after_midnight_the_previous_days_key_is_looked_up() -> None:
    args = {"entity_id": "o-1", "action_type": "open", "params": {}}
    before = dt.datetime(2026, 5, 17, 23, 59, 59, tzinfo=UTC)
    after = before + dt.timedelta(seconds=2)
    first, _ = keying.keys_for(SECRET, "acme", "k1", "send_desk", args, before)
    current, previous = keying.keys_for(SECRET, "acme", "k1", "send_desk", args, after)
    assert current != first and previous == first
    later = after + keying.MAX_LOOKBACK
    assert keying.keys_for(SECRET, "acme", "k1", "send_desk", args, later)[1] is None


def test_an_hourly_channels_key_is_the_hours() -> None:
    args = {"entity_id": "o-1", "action_type": "page", "params": {}}
    nine = dt.datetime(2026, 5, 17, 9, 20, tzinfo=UTC)
    key, previous = keying.keys_for(SECRET, "acme", "k1", "send_pager", args, nine, "hour")
    assert previous is None
    # The next hour is another action; its first quarter of an hour looks back for a retry.
    ten = nine + dt.timedelta(minutes=45)
    current, previous = keying.keys_for(SECRET, "acme", "k1", "send_pager", args, ten, "hour")
    assert current != key and previous == key
    assert keying.lookback("hour") == dt.timedelta(minutes=15)
    past = nine + dt.timedelta(hours=1)
    assert keying.keys_for(SECRET, "acme", "k1", "send_pager", args, past, "hour")[1] is None
    # A day's and a week's look-back stay an hour; "once, ever" has one key and none.
    assert keying.lookback("day") == keying.lookback("week") == dt.timedelta(hours=1)
    assert keying.lookback("none") is None
    once = keying.keys_for(SECRET, "acme", "k1", "send_pager", args, nine, "none")
    later = keying.keys_for(SECRET, "acme", "k1", "send_pager", args, past, "none")
    assert once == later and once[1] is None


def test_the_coverage_line_names_what_is_missing_and_when_to_retry() -> None:
    slow = Failure("timeout", "NAMESPACE_TIMEOUT", "", True, 1500, namespace="orders")
    gone = Failure("permanent", "NAMESPACE_UNAVAILABLE", "", False, None, namespace="nope")
    assert (
        shapes.coverage_note(2, 4, "namespaces", [slow, gone])
        == "2 of 4 namespaces answered; orders timed out, retry after 1.5 s; "
        "nope failed (permanent NAMESPACE_UNAVAILABLE), not retryable"
    )
    assert shapes.coverage_note(3, 3, "namespaces", []) == "3 of 3 namespaces answered; complete"
