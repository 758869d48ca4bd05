"""The reach configuration file: every mistake is one ConfigError naming the key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.config import check_channels, parse_config

VALID: dict[str, Any] = {
    "engine": {"workers": 4, "lease_s": 10, "alert_channel": "hook"},
    "channels": {
        "hook": {
            "kind": "webhook",
            "description": "posts",
            "action_types": ["notify"],
            "quota_per_second": 20,
            "retry": {"max_retries": 2},
            "webhook": {"url": "http://127.0.0.1:9/hook"},
        }
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return data


def test_a_valid_file_gives_channels_with_the_documented_defaults() -> None:
    config = parse_config(VALID)
    hook = config.channels["hook"]
    assert (config.workers, config.lease_s, config.alert_channel) == (4, 10.0, "hook")
    assert hook.send_rate_per_second == 14.0
    assert hook.retry.max_retries == 2 and hook.retry.base_s == 0.5 and hook.retry.cap_s == 30
    assert (hook.breaker.window_s, hook.breaker.min_samples, hook.breaker.open_s) == (10, 20, 30)
    assert hook.breaker.half_open_probes == 5 and hook.breaker.failure_rate == 0.5
    assert hook.window == "day" and not hook.idempotent
    assert hook.pending.stall_timeout_s == 120


def test_no_file_means_no_channels() -> None:
    assert parse_config({}).channels == {}


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("channels.hook.retries", 3, "channels.hook.retries"),
        ("channels.hook.kind", "pigeon", "channels.hook.kind"),
        ("channels.hook.description", None, "channels.hook.description"),
        ("channels.hook.action_types", [], "channels.hook.action_types"),
        ("channels.hook.window", "month", "channels.hook.window"),
        ("channels.hook.quota_per_second", 0, "channels.hook.quota_per_second"),
        ("channels.hook.quota_per_second", "fast", "channels.hook.quota_per_second"),
        ("channels.hook.idempotent", "yes", "channels.hook.idempotent"),
        ("channels.hook.receiver_deduplicates", 1, "channels.hook.receiver_deduplicates"),
        ("engine.logical_time_tolerance_s", -1, "engine.logical_time_tolerance_s"),
        ("channels.hook.email", {"host": "x"}, "channels.hook.email"),
        ("channels.hook.retry", {"base_s": -1}, "channels.hook.retry.base_s"),
        ("channels.hook.breaker", {"failure_rate": 2}, "channels.hook.breaker.failure_rate"),
        ("channels.hook.rules", [{"expr": "params.x <", "message": "m"}], "channels.hook.rules[0]"),
        ("channels.hook.parameters", {"type": "nonsense"}, "channels.hook.parameters"),
        ("engine.workers", 0, "engine.workers"),
        ("engine.lease_s", 1, "engine.lease_s"),
        ("engine.alert_channel", "nowhere", "engine.alert_channel"),
        ("engine.speed", 3, "engine.speed"),
        ("engine.alert_channels", {"sales": "hook"}, "engine.alert_channels.sales"),
        ("engine.alert_channels", {"business": "nowhere"}, "engine.alert_channels.business"),
        ("engine.alert_channels", "hook", "engine.alert_channels"),
        ("engine.dedupe_retention_days", 7, "engine.dedupe_retention_days"),
        ("engine.dedupe_retention_days", 4000, "engine.dedupe_retention_days"),
        ("engine.dedupe_retention_days", 90.5, "engine.dedupe_retention_days"),
    ],
)
def test_each_mistake_names_its_key(path: str, value: Any, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with(path, value))
    assert named in str(caught.value)


def test_channel_names_follow_the_naming_rule() -> None:
    data = copy.deepcopy(VALID)
    data["channels"]["Bad Name"] = data["channels"].pop("hook")
    data["engine"]["alert_channel"] = ""
    with pytest.raises(ConfigError, match="channels.Bad Name"):
        parse_config(data)


def test_a_receiver_is_not_taken_to_de_duplicate_unless_the_channel_says_so() -> None:
    """Sending the key (the webhook default) is not the receiver honouring it."""
    config = parse_config(VALID)
    hook = config.channels["hook"]
    assert not hook.receiver_deduplicates and not hook.idempotent and not hook.safe_to_resend
    assert build_channel("webhook", hook.options, "hook", {}).sends_idempotency_key
    said = parse_config(_with("channels.hook.receiver_deduplicates", True))
    assert said.channels["hook"].safe_to_resend


def _checked(data: dict[str, Any]) -> None:
    config = parse_config(data)
    channels = {
        name: build_channel(cfg.kind, cfg.options, name, {})
        for name, cfg in config.channels.items()
    }
    check_channels(config, channels)


def test_a_send_that_cannot_end_inside_the_lease_is_refused() -> None:
    """The webhook defaults (3 s to connect, 8 s to read) do not end 1 s before a 10 s
    lease: refused, naming the settings and the lease."""
    with pytest.raises(ConfigError) as caught:
        _checked(VALID)
    text = str(caught.value)
    assert "channels.hook.webhook" in text and "connect_timeout_s + read_timeout_s" in text
    assert "engine.lease_s (10 s)" in text
    _checked(_with("engine.lease_s", 12))
    fits = _with("channels.hook.webhook", {"url": "http://127.0.0.1:9/h", "read_timeout_s": 6})
    _checked(fits)


def test_a_receiver_said_to_de_duplicate_must_be_sent_the_key() -> None:
    data = _with("engine.lease_s", 30)
    data["channels"]["hook"]["receiver_deduplicates"] = True
    data["channels"]["hook"]["webhook"]["idempotency_header"] = False
    with pytest.raises(ConfigError, match="channels.hook.receiver_deduplicates"):
        _checked(data)


def test_dedupe_records_are_kept_90_days_unless_the_file_says_otherwise() -> None:
    assert parse_config(VALID).dedupe_retention_days == 90
    assert parse_config(_with("engine.dedupe_retention_days", 30)).dedupe_retention_days == 30


def test_each_failure_kind_goes_to_its_own_alert_channel_or_the_default_one() -> None:
    data = copy.deepcopy(VALID)
    data["channels"]["ops"] = copy.deepcopy(data["channels"]["hook"])
    data["engine"]["alert_channels"] = {"technical": "ops"}
    config = parse_config(data)
    assert config.alert_route("technical") == "ops"
    assert config.alert_route("business") == "hook"  # engine.alert_channel
    data["engine"]["alert_channel"] = ""
    alone = parse_config(data)
    assert alone.alert_route("business") == "" and alone.routed_failure_kinds == ("technical",)
    assert parse_config({"channels": {}}).routed_failure_kinds == ()
