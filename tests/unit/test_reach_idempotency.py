"""Idempotency keys: windows, the parameter digest, and the key's text form."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import math
from typing import Any

import pytest
from google.protobuf import struct_pb2

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.windows import WINDOWS, window_bucket, window_start
from reachstore_server.reach.idempotency import (
    IdempotencyKey,
    KeySecrets,
    build_key,
    canonical_params,
    entity_part,
    key_secrets_from_env,
    legacy_key,
    look_up_keys,
    params_digest,
    previous_secrets,
)

UTC = datetime.UTC
SECRET = b"unit-test-key-secret-0123456789"
TENANT = "acme"
OTHER = b"unit-test-key-secret-rotated-01"


def digest(params: Any, whitelist: Any) -> str:
    return params_digest(params, whitelist, SECRET, TENANT)


def at(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    *,
    tz: datetime.tzinfo = UTC,
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=tz)


# --- windows ---------------------------------------------------------------------------


def test_window_buckets() -> None:
    moment = at(2026, 11, 30, 5, 17, 42)
    assert WINDOWS == ("none", "hour", "day", "week")
    assert [window_bucket(moment, w) for w in WINDOWS] == [
        "-",
        "2026-11-30T05",
        "2026-11-30",
        "2026-W49",  # Monday 30 November 2026 starts ISO week 49
    ]
    assert window_bucket(at(2026, 11, 29, 12), "week") == "2026-W48"


def test_a_window_starts_where_its_bucket_does() -> None:
    moment = at(2026, 12, 3, 5, 17, 42)  # a Thursday
    assert window_start(moment, "none") is None
    assert window_start(moment, "hour") == at(2026, 12, 3, 5)
    assert window_start(moment, "day") == at(2026, 12, 3)
    assert window_start(moment, "week") == at(2026, 11, 30)  # the Monday of ISO week 49
    for window in ("hour", "day", "week"):
        start = window_start(moment, window)
        assert start is not None
        assert window_bucket(start, window) == window_bucket(moment, window)
        before = start - datetime.timedelta(microseconds=1)
        assert window_bucket(before, window) != window_bucket(moment, window)


def test_the_last_millisecond_and_the_next_day_fall_in_different_buckets() -> None:
    before = datetime.datetime(2026, 11, 29, 23, 59, 59, 999_000, tzinfo=UTC)  # a Sunday
    after = at(2026, 11, 30)
    for window in ("hour", "day", "week"):
        assert window_bucket(before, window) != window_bucket(after, window), window
    assert window_bucket(before, "none") == window_bucket(after, "none") == "-"
    assert window_bucket(before, "day") == "2026-11-29"
    assert window_bucket(after, "day") == "2026-11-30"


def test_a_bucket_holds_its_whole_period() -> None:
    monday, sunday_night = at(2026, 11, 30), at(2026, 12, 6, 23, 59, 59)
    assert window_bucket(monday, "week") == window_bucket(sunday_night, "week")
    assert window_bucket(at(2026, 1, 1, 7), "hour") == window_bucket(at(2026, 1, 1, 7, 59), "hour")


def test_iso_weeks_cross_the_year_boundary() -> None:
    # 2026 starts on a Thursday, so it has 53 ISO weeks, the last ending on Sunday 3 Jan 2027.
    assert window_bucket(at(2026, 12, 31), "week") == "2026-W53"
    assert window_bucket(at(2027, 1, 3, 23, 59), "week") == "2026-W53"
    assert window_bucket(at(2027, 1, 4), "week") == "2027-W01"
    # And the other way: Monday 30 December 2024 is in week 1 of 2025.
    assert window_bucket(at(2024, 12, 29, 23, 59, 59), "week") == "2024-W52"
    assert window_bucket(at(2024, 12, 30), "week") == "2025-W01"
    assert window_bucket(at(2024, 12, 30), "day") == "2024-12-30"


def test_buckets_are_taken_in_utc() -> None:
    new_york = datetime.timezone(datetime.timedelta(hours=-5))
    tokyo = datetime.timezone(datetime.timedelta(hours=9))
    assert window_bucket(at(2026, 11, 30, 22, 30, tz=new_york), "day") == "2026-12-01"
    assert window_bucket(at(2026, 11, 30, 22, 30, tz=new_york), "hour") == "2026-12-01T03"
    assert window_bucket(at(2027, 1, 4, 8, tz=tokyo), "week") == "2026-W53"  # Sunday in UTC
    same_moment = (at(2026, 11, 30, 5), at(2026, 11, 30, 14, tz=tokyo))
    assert len({window_bucket(m, "hour") for m in same_moment}) == 1


def test_naive_datetimes_and_unknown_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        window_bucket(datetime.datetime(2026, 11, 30, 5), "day")
    with pytest.raises(ValueError, match="timezone-aware"):
        window_bucket(datetime.datetime(2026, 11, 30, 5), "none")
    with pytest.raises(ValueError, match="window must be one of"):
        window_bucket(at(2026, 11, 30), "month")


# --- digest ----------------------------------------------------------------------------


def test_the_digest_is_an_hmac_under_the_secret_of_the_tenant_and_canonical_json() -> None:
    params = {"name": "Zoë", "amount": 12.0, "meta": {"z": 1, "a": [1.5, None, True]}}
    canonical = '{"amount":12,"meta":{"a":[1.5,null,true],"z":1},"name":"Zoë"}'
    assert canonical_params(params, []) == canonical
    message = ("reach-params\x00" + TENANT + "\x00" + canonical).encode()
    expected = hmac.new(SECRET, message, hashlib.sha256).hexdigest()[:16]
    assert digest(params, []) == expected
    picked = '{"amount":12,"name":"Zoë"}'
    assert canonical_params({"amount": 12, "name": "Zoë"}, ["name", "amount"]) == picked
    # Not the plain SHA-256 older keys carried: that one is confirmed by guessing.
    assert digest(params, []) != hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_another_secret_gives_another_digest() -> None:
    params = {"to": "+8613800138000"}
    assert params_digest(params, ["to"], OTHER, TENANT) != digest(params, ["to"])
    assert params_digest(params, ["to"], SECRET, TENANT) == digest(params, ["to"])
    # Another tenant gets another digest of the same parameters.
    assert params_digest(params, ["to"], SECRET, "globex") != digest(params, ["to"])


def test_key_order_does_not_matter_at_any_depth() -> None:
    one = {"a": 1, "b": {"x": 1, "y": [{"p": 1, "q": 2}]}}
    two = {"b": {"y": [{"q": 2, "p": 1}], "x": 1}, "a": 1}
    assert digest(one, []) == digest(two, [])
    assert digest(one, ["b", "a"]) == digest(two, ["a", "b"])


def test_integral_floats_digest_like_integers() -> None:
    assert digest({"n": 3}, ["n"]) == digest({"n": 3.0}, ["n"])
    assert digest({"n": [1, {"m": -2}]}, []) == digest({"n": [1.0, {"m": -2.0}]}, [])
    assert digest({"n": 0}, []) == digest({"n": -0.0}, [])
    assert digest({"n": 3}, []) != digest({"n": 3.5}, [])


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ({"n": 1}, {"n": True}),
        ({"n": 0}, {"n": False}),
        ({"n": 3}, {"n": "3"}),
        ({"n": None}, {}),
        ({"n": None}, {"n": "null"}),
        ({"n": []}, {"n": {}}),
        ({"n": "a"}, {"n": ["a"]}),
    ],
)
def test_different_values_digest_differently(one: dict[str, Any], two: dict[str, Any]) -> None:
    assert digest(one, []) != digest(two, [])
    assert digest(one, ["n"]) != digest(two, ["n"])


def test_parameters_outside_the_whitelist_never_change_the_digest() -> None:
    whitelist = ["to", "template", "vars.first_name"]
    base = {"to": "+33600000000", "template": "reminder", "vars": {"first_name": "Zoë"}}
    first = digest(base, whitelist)
    noisy = {
        **base,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "retry_count": 3.0,
        "vars": {"first_name": "Zoë", "sent_at": "2026-11-30T05:00:00Z"},
    }
    assert digest(noisy, whitelist) == first
    assert digest({**noisy, "retry_count": 4.0}, whitelist) == first
    # A whitelisted parameter does change it, nested ones included.
    assert digest({**base, "to": "+33600000001"}, whitelist) != first
    assert digest({**base, "vars": {"first_name": "Zoe"}}, whitelist) != first


def test_whitelist_order_and_repeats_do_not_matter() -> None:
    params = {"a": 1, "b": 2, "c": 3}
    assert digest(params, ["a", "b"]) == digest(params, ["b", "a", "b"])
    assert digest(params, ["a", "b"]) != digest(params, ["a", "c"])


def test_a_missing_path_is_absent_not_null() -> None:
    whitelist = ["to", "vars.name"]
    absent = digest({"to": "x"}, whitelist)
    assert digest({"to": "x", "vars": {}}, whitelist) == absent
    assert digest({"to": "x", "vars": "not an object"}, whitelist) == absent
    assert digest({"to": "x", "vars": {"name": None}}, whitelist) != absent
    assert digest({"to": "x", "vars": None}, whitelist) == absent
    assert digest({"to": "x"}, ["to", "vars"]) != digest({"to": "x", "vars": None}, ["to", "vars"])


def test_an_empty_whitelist_means_every_parameter() -> None:
    assert digest({"a": 1, "trace_id": "t1"}, []) != digest({"a": 1, "trace_id": "t2"}, [])
    assert digest({"a": 1}, ()) == digest({"a": 1.0}, [])


def test_protobuf_struct_parameters_digest_like_plain_ones() -> None:
    plain = {"to": "a@b.c", "count": 3, "vars": {"items": [1, "x", None, True]}}
    struct = struct_pb2.Struct()
    struct.update(plain)
    assert digest(struct, []) == digest(plain, [])
    whitelist = ["count", "vars.items", "missing.path"]
    assert digest(struct, whitelist) == digest(plain, whitelist)


def test_what_cannot_be_digested_is_refused() -> None:
    with pytest.raises(ValueError, match=r"parameter a\.b is not a finite number"):
        digest({"a": {"b": math.nan}}, [])
    with pytest.raises(ValueError, match="not a finite number"):
        digest({"a": math.inf}, ["a"])
    with pytest.raises(TypeError, match=r"parameter when has a type"):
        digest({"when": datetime.datetime(2026, 1, 1)}, [])
    with pytest.raises(TypeError, match="non-string key"):
        digest({"a": {1: "x"}}, [])
    for bad in ("", "a..b", ".a", "a."):
        with pytest.raises(ValueError, match="dotted names"):
            digest({"a": 1}, [bad])


# --- keys ------------------------------------------------------------------------------

ORDER_42 = entity_part(SECRET, "acme", "order-42")


def key(entity: str = ORDER_42, **changes: str) -> IdempotencyKey:
    fields = {
        "tenant": "acme",
        "entity": entity,
        "action_type": "sms.send",
        "digest": "0123456789abcdef",
        "window": "2026-11-30",
    }
    return IdempotencyKey(**{**fields, **changes})


def test_the_entity_part_is_an_hmac_of_tenant_and_entity() -> None:
    message = b"reach-entity\x00acme\x00order-42"
    expected = "e:" + hmac.new(SECRET, message, hashlib.sha256).hexdigest()[:32]
    assert ORDER_42 == expected
    assert entity_part(SECRET, "acme2", "order-42") != ORDER_42  # the tenant is in it
    assert entity_part(OTHER, "acme", "order-42") != ORDER_42  # and the secret
    # One entity typed in two Unicode forms is one entity.
    assert entity_part(SECRET, "acme", "Zoe\u0301") == entity_part(SECRET, "acme", "Zoé")


def test_a_key_renders_as_slash_separated_parts() -> None:
    assert str(key()) == f"acme/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30"
    assert "order-42" not in str(key())


@pytest.mark.parametrize(
    "entity_id",
    ["order-42", "a/b", "/", "50%", "%2F", "a/b%2Fc", "Zoë/🙂", "with space", "?#&=+", "-"],
)
def test_keys_round_trip_through_their_text(entity_id: str) -> None:
    original = key(
        entity_part(SECRET, "t/1%", entity_id), tenant="t/1%", action_type="crm/update é"
    )
    text = str(original)
    assert text.count("/") == 4
    assert text.isascii()
    assert IdempotencyKey.parse(text) == original


def test_a_slash_in_a_tenant_or_type_cannot_make_two_keys_read_alike() -> None:
    one = key(tenant="a/b", action_type="c")
    two = key(tenant="a", action_type="b/c")
    assert str(one) != str(two)
    assert str(key(tenant="a/b")) == f"a%2Fb/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30"
    assert str(key(tenant="a%2Fb")).startswith("a%252Fb/")


@pytest.mark.parametrize(
    "entity",
    ["order-42", "e:" + "0" * 31, "e:" + "0" * 33, "e:" + "A" * 32, "x:" + "0" * 32, ""],
)
def test_an_entity_part_that_is_not_a_hash_is_refused(entity: str) -> None:
    with pytest.raises(ValueError, match="entity must be 'e:' and 32 lowercase hex") as refused:
        key(entity)
    assert entity not in str(refused.value) or not entity  # the value is never repeated


@pytest.mark.parametrize(
    "text",
    [
        f"acme/{ORDER_42}/sms.send/0123456789abcdef",  # four parts
        f"acme/a/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30",  # an unencoded slash
        f"ac%2fme/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30",  # not canonical
        f"acme/{ORDER_42}/sms%zz/0123456789abcdef/2026-11-30",
        f"acmé/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30",  # unencoded non-ASCII
        f"%FF/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30",  # not UTF-8
        "acme//sms.send/0123456789abcdef/2026-11-30",  # empty entity
        "acme/order-42/sms.send/0123456789abcdef/2026-11-30",  # an entity in clear
        f"acme/{ORDER_42.upper()}/sms.send/0123456789abcdef/2026-11-30",
        f"acme/{ORDER_42}/sms.send/0123456789ABCDEF/2026-11-30",
        f"acme/{ORDER_42}/sms.send/0123456789abcde/2026-11-30",
        f"acme/{ORDER_42}/sms.send/0123456789abcdef/2026-11",
        f"acme/{ORDER_42}/sms.send/0123456789abcdef/2026-W4",
        f"acme/{ORDER_42}/sms.send/0123456789abcdef/",
    ],
)
def test_parse_refuses_anything_but_a_rendered_key(text: str) -> None:
    with pytest.raises(ValueError):
        IdempotencyKey.parse(text)


@pytest.mark.parametrize("window", ["-", "2026-11-30T05", "2026-11-30", "2026-W48"])
def test_every_bucket_shape_parses(window: str) -> None:
    assert IdempotencyKey.parse(str(key(window=window))).window == window


def test_a_key_cannot_change_once_made() -> None:
    made = key()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.entity = entity_part(SECRET, "acme", "order-43")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.digest = "fedcba9876543210"  # type: ignore[misc]
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        made.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(made, "__dict__")
    assert str(made) == f"acme/{ORDER_42}/sms.send/0123456789abcdef/2026-11-30"
    assert {made: 1}[key()] == 1  # equal keys hash alike


def test_build_key_puts_it_all_together() -> None:
    params = {"to": "+33600000000", "body": "Votre RDV", "trace_id": "abc"}
    whitelist = ["to", "body"]

    def build(secret: bytes = SECRET, **changes: Any) -> IdempotencyKey:
        fields: dict[str, Any] = {
            "tenant": "acme",
            "entity_id": "rdv/2026/0042",
            "action_type": "sms.send",
            "params": params,
            "whitelist": whitelist,
            "at": at(2026, 11, 30, 5),
            "window": "day",
        }
        return build_key(secret, **{**fields, **changes})

    built = build()
    assert built == IdempotencyKey(
        "acme",
        entity_part(SECRET, "acme", "rdv/2026/0042"),
        "sms.send",
        digest(params, whitelist),
        "2026-11-30",
    )
    assert "rdv" not in str(built) and "+33600000000" not in str(built)
    # The same intent later that day, retried with a new trace id: the same key.
    again = {**params, "trace_id": "def", "body": "Votre RDV"}
    assert build(params=again, at=at(2026, 11, 30, 18)) == built
    # The next day, another tenant, another action, another secret: other keys.
    assert build(at=at(2026, 12, 1)) != built
    assert build(tenant="acme2") != built
    assert build(action_type="email.send") != built
    assert build(OTHER) != built


def test_look_ups_cover_previous_secrets_and_the_legacy_form() -> None:
    intent: tuple[Any, ...] = (
        "acme",
        "zhang.wei@example.com",
        "notify",
        {"to": "zhang.wei@example.com"},
        ["to"],
        at(2026, 11, 30, 5),
        "day",
    )
    secrets = KeySecrets(SECRET, [OTHER])
    looked_up = look_up_keys(secrets, *intent)
    assert looked_up == (str(build_key(OTHER, *intent)), legacy_key(*intent))
    assert (
        str(build_key(SECRET, *intent)) not in looked_up
    )  # the current key is made, not looked up
    # The legacy form is what earlier releases stored: the entity percent-encoded in clear
    # and a plain SHA-256 of the canonical parameters.
    plain = hashlib.sha256(b'{"to":"zhang.wei@example.com"}').hexdigest()[:16]
    assert legacy_key(*intent) == f"acme/zhang.wei%40example.com/notify/{plain}/2026-11-30"
    assert look_up_keys(KeySecrets(SECRET), *intent) == (legacy_key(*intent),)


def test_key_secrets_come_from_the_environment() -> None:
    one, two = "a-previous-secret-0001", "a-previous-secret-0002"
    secrets = key_secrets_from_env(
        {
            "REACHSTORE_PII_SECRET": SECRET.decode(),
            "REACHSTORE_PII_SECRET_PREVIOUS": f"{one}, {two}",
        }
    )
    assert secrets.current == SECRET
    assert secrets.previous == (one.encode(), two.encode())
    assert SECRET.decode() not in repr(secrets) and one not in repr(secrets)
    assert previous_secrets({}) == () == previous_secrets({"REACHSTORE_PII_SECRET_PREVIOUS": " "})
    # Listing the current secret among the previous ones changes nothing.
    same = KeySecrets(SECRET, [SECRET, OTHER])
    assert same.previous == (OTHER,)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "REACHSTORE_PII_SECRET is required by reach"),
        ({"REACHSTORE_PII_SECRET": "short"}, "REACHSTORE_PII_SECRET must be at least 16 bytes"),
        (
            {"REACHSTORE_PII_SECRET": SECRET.decode(), "REACHSTORE_PII_SECRET_PREVIOUS": "tiny"},
            "REACHSTORE_PII_SECRET_PREVIOUS entry 1 must be at least 16 bytes, got 4",
        ),
        (
            {
                "REACHSTORE_PII_SECRET": SECRET.decode(),
                "REACHSTORE_PII_SECRET_PREVIOUS": "a-previous-secret-0001,,x",
            },
            "REACHSTORE_PII_SECRET_PREVIOUS has an empty entry \\(number 2\\)",
        ),
    ],
)
def test_bad_key_secrets_are_refused_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        key_secrets_from_env(env)
    for value in env.values():
        assert value not in str(refused.value)
