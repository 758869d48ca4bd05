"""Planning and reserving on a real store, with the clock in the test's hands: the time
window of an idempotency key is fixed at first reservation, so a retry that crosses the
window's boundary finds the same action instead of minting a new key."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from reachstore_server.common import errors
from reachstore_server.common.auth import Caller
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.config import ReachConfig, load_config, parse_config
from reachstore_server.reach.idempotency import KeySecrets, entity_part, legacy_key
from reachstore_server.reach.planning import ActionSpec, TaskSpec, plan_task
from reachstore_server.reach.store import ActionPlan, ReachStore, TaskPlan

CALLER = Caller("acme", "k1", frozenset({"reach"}), groups=("ops",))
SECRET = b"planning-test-key-secret-0001"
ROTATED = b"planning-test-key-secret-0002"
SECRETS = KeySecrets(SECRET)
BEFORE_MIDNIGHT = dt.datetime(2026, 11, 30, 23, 59, 59, 900_000, tzinfo=dt.UTC)
AFTER_MIDNIGHT = dt.datetime(2026, 12, 1, 0, 0, 0, 100_000, tzinfo=dt.UTC)
CONFIG = {
    "channels": {
        "hook": {
            "kind": "webhook",
            "description": "d",
            "action_types": ["dispatch"],
            "idempotency_params": ["ticket", "group"],
            "window": "day",
            "parameters": {"type": "object", "required": ["ticket"]},
            "rules": [{"expr": "params.group in caller.groups", "message": "own groups only"}],
            "webhook": {"url": "http://127.0.0.1:9/hook"},
        }
    }
}


@pytest.fixture
def config() -> ReachConfig:
    return parse_config(CONFIG)


def _plan(  # type: ignore[no-untyped-def]
    config: ReachConfig, now: dt.datetime, secrets: KeySecrets = SECRETS, **task: str
):
    channels = {
        name: build_channel(cfg.kind, cfg.options, name, {})
        for name, cfg in config.channels.items()
    }
    spec = TaskSpec(
        entity_id="WO20261130-8821",
        idempotency_key=task.get("idempotency_key", ""),
        logical_time=task.get("logical_time", ""),
        trace_id="",
        actions=(
            ActionSpec(
                "dispatch",
                "hook",
                "dispatch",
                {"ticket": "WO20261130-8821", "group": "ops", "trace": task.get("noise", "")},
                (),
                True,
            ),
        ),
    )
    return plan_task(spec, CALLER, config, channels, "", now, key_secrets=secrets)


def test_a_retry_after_midnight_with_the_caller_key_finds_the_same_action(
    store: ReachStore, config: ReachConfig
) -> None:
    first = store.reserve(_plan(config, BEFORE_MIDNIGHT, idempotency_key="turn-1"))
    retry = _plan(config, AFTER_MIDNIGHT, idempotency_key="turn-1")
    # Planned afresh, the key would fall in the next day's window ...
    assert retry.actions[0].window == "2026-12-01"
    # ... but the reservation made before midnight is what the retry gets.
    again = store.reserve(retry)
    assert again.deduplicated and again.task.task_id == first.task.task_id
    assert again.actions[0].idem_key == first.actions[0].idem_key
    assert first.actions[0].window == "2026-11-30"


def test_a_logical_time_pins_the_window_without_a_caller_key(
    store: ReachStore, config: ReachConfig
) -> None:
    pinned = "2026-11-30T23:59:59.900Z"
    first = store.reserve(_plan(config, BEFORE_MIDNIGHT, logical_time=pinned))
    again = store.reserve(_plan(config, AFTER_MIDNIGHT, logical_time=pinned))
    assert again.deduplicated and again.actions[0].idem_key == first.actions[0].idem_key


def test_the_next_days_action_is_a_new_action(store: ReachStore, config: ReachConfig) -> None:
    today = store.reserve(_plan(config, BEFORE_MIDNIGHT))
    tomorrow = store.reserve(_plan(config, AFTER_MIDNIGHT))
    assert not tomorrow.deduplicated
    assert tomorrow.actions[0].idem_key != today.actions[0].idem_key


def test_parameters_outside_the_whitelist_do_not_change_the_key(config: ReachConfig) -> None:
    one = _plan(config, BEFORE_MIDNIGHT, noise="trace-a")
    two = _plan(config, BEFORE_MIDNIGHT, noise="trace-b")
    assert one.actions[0].idem_key == two.actions[0].idem_key
    entity = entity_part(SECRET, "acme", "WO20261130-8821")
    assert one.actions[0].idem_key.startswith(f"acme/{entity}/dispatch/")
    assert one.actions[0].idem_key.endswith("/2026-11-30")
    assert "WO20261130-8821" not in one.actions[0].idem_key


def test_a_task_reserved_under_a_previous_secret_is_found_after_the_rotation(
    store: ReachStore, config: ReachConfig
) -> None:
    before = store.reserve(_plan(config, BEFORE_MIDNIGHT))
    rotated = KeySecrets(ROTATED, [SECRET])
    after = store.reserve(_plan(config, BEFORE_MIDNIGHT, rotated))
    assert after.deduplicated and after.task.task_id == before.task.task_id
    assert after.actions[0].idem_key == before.actions[0].idem_key
    # Without the previous secret the same intent gets a key of its own: a new action.
    forgotten = store.reserve(_plan(config, BEFORE_MIDNIGHT, KeySecrets(ROTATED)))
    assert not forgotten.deduplicated
    assert forgotten.actions[0].idem_key != before.actions[0].idem_key


def test_a_task_stored_with_a_key_in_the_legacy_form_is_still_found(
    store: ReachStore, config: ReachConfig
) -> None:
    """Rows older releases wrote keep their keys (the entity in clear); a re-submission of
    the same intent finds them instead of sending again."""
    plan = _plan(config, BEFORE_MIDNIGHT)
    [action] = plan.actions
    params = {"ticket": "WO20261130-8821", "group": "ops", "trace": ""}
    old = legacy_key(
        "acme", "WO20261130-8821", "dispatch", params, ["ticket", "group"], BEFORE_MIDNIGHT, "day"
    )
    assert "WO20261130-8821" in old
    stored = store.reserve(
        TaskPlan(
            tenant=plan.tenant,
            entity_id=plan.entity_id,
            caller_key=None,
            request_digest=plan.request_digest,
            logical_time=plan.logical_time,
            trace_id=plan.trace_id,
            submitted_by=plan.submitted_by,
            actions=(
                ActionPlan(
                    action.name,
                    action.channel,
                    action.action_type,
                    action.params,
                    action.depends_on,
                    action.required,
                    old,
                    action.window,
                ),
            ),
        )
    )
    again = store.reserve(plan)
    assert again.deduplicated and again.task.task_id == stored.task.task_id
    assert again.actions[0].idem_key == old  # kept as it was stored


def test_the_key_is_immutable(config: ReachConfig) -> None:
    plan = _plan(config, BEFORE_MIDNIGHT)
    with pytest.raises(AttributeError):
        plan.actions[0].idem_key = "another"  # type: ignore[misc]


def test_rules_see_the_callers_groups(config: ReachConfig) -> None:
    outsider = Caller("acme", "k2", frozenset({"reach"}), groups=("finance",))
    channels = {"hook": build_channel("webhook", config.channels["hook"].options, "hook", {})}
    spec = TaskSpec(
        "WO-1",
        "",
        "",
        "",
        (ActionSpec("d", "hook", "dispatch", {"ticket": "WO-1", "group": "ops"}, (), True),),
    )
    with pytest.raises(errors.ReachstoreError) as caught:
        plan_task(spec, outsider, config, channels, "", BEFORE_MIDNIGHT, key_secrets=SECRETS)
    assert caught.value.code == "PARAMS_REJECTED"
    assert caught.value.details[0].structured_data["rule"] == "own groups only"


def test_the_example_configuration_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "reach.toml"
    config = load_config(example)
    assert set(config.channels) == {"ticket-dispatch", "notify-mail", "ops-alerts"}
    assert config.channels["ticket-dispatch"].send_rate_per_second == 7.0
    env = {"TICKETING_TOKEN": "secret-value"}
    for name, cfg in config.channels.items():
        build_channel(cfg.kind, cfg.options, f"channels.{name}.{cfg.kind}", env)


@pytest.mark.parametrize("days", [-2, -1, 1, 2])
def test_a_logical_time_far_from_the_servers_clock_is_refused(
    store: ReachStore, config: ReachConfig, days: int
) -> None:
    """An agent that stamps another day on a retry cannot mint another key for the same
    action: the server owns the window (docs/AT_MOST_ONCE.md, section 4)."""
    first = store.reserve(_plan(config, BEFORE_MIDNIGHT))
    moved = (BEFORE_MIDNIGHT + dt.timedelta(days=days)).isoformat()
    with pytest.raises(errors.ReachstoreError) as caught:
        _plan(config, BEFORE_MIDNIGHT, logical_time=moved)
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.field == "logical_time"
    assert "within 300 s of the server's clock" in str(caught.value)
    # Without a logical time, the same action on the same day is the same action.
    assert store.reserve(_plan(config, BEFORE_MIDNIGHT)).task.task_id == first.task.task_id


def test_the_tolerance_is_a_setting(store: ReachStore) -> None:
    strict = parse_config({**CONFIG, "engine": {"logical_time_tolerance_s": 0}})
    with pytest.raises(errors.ReachstoreError):
        _plan(strict, BEFORE_MIDNIGHT, logical_time="2026-11-30T23:59:58Z")
    exact = BEFORE_MIDNIGHT.isoformat()
    assert _plan(strict, BEFORE_MIDNIGHT, logical_time=exact).actions[0].window == "2026-11-30"


def test_the_same_text_typed_two_ways_is_one_action(config: ReachConfig) -> None:
    """ "é" as one code point (NFC) and as e + combining acute (NFD) digest alike."""
    channels = {"hook": build_channel("webhook", config.channels["hook"].options, "hook", {})}

    def key(ticket: str, entity: str) -> str:
        params = {"ticket": ticket, "group": "ops"}
        spec = TaskSpec(
            entity, "", "", "", (ActionSpec("d", "hook", "dispatch", params, (), True),)
        )
        plan = plan_task(spec, CALLER, config, channels, "", BEFORE_MIDNIGHT, key_secrets=SECRETS)
        return plan.actions[0].idem_key

    assert key("Caf\u00e9", "Jos\u00e9") == key("Cafe\u0301", "Jose\u0301")
    assert key("Caf\u00e9", "x") != key("Cafe", "x")


def test_parameter_keys_that_are_one_in_nfc_are_refused(config: ReachConfig) -> None:
    channels = {"hook": build_channel("webhook", config.channels["hook"].options, "hook", {})}
    params = {"ticket": "T", "group": "ops", "Caf\u00e9": 1, "Cafe\u0301": 2}
    spec = TaskSpec("WO-1", "", "", "", (ActionSpec("d", "hook", "dispatch", params, (), True),))
    plain = parse_config(
        {**CONFIG, "channels": {"hook": {**CONFIG["channels"]["hook"], "idempotency_params": []}}}
    )
    with pytest.raises(errors.ReachstoreError) as caught:
        plan_task(spec, CALLER, plain, channels, "", BEFORE_MIDNIGHT, key_secrets=SECRETS)
    assert caught.value.code == "PARAMS_REJECTED"
    assert "two keys that are one in NFC" in caught.value.details[0].structured_data["rule"]
