"""Idempotency keys: windows, the parameter digest, and the key's text form."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
from typing import Any

import pytest
from google.protobuf import struct_pb2

from services.reach.idempotency import (
    WINDOWS,
    IdempotencyKey,
    build_key,
    params_digest,
    window_bucket,
)

UTC = datetime.UTC


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


def test_the_digest_is_16_hex_characters_of_sha256_over_canonical_json() -> None:
    params = {"name": "Zoë", "amount": 12.0, "meta": {"z": 1, "a": [1.5, None, True]}}
    canonical = '{"amount":12,"meta":{"a":[1.5,null,true],"z":1},"name":"Zoë"}'
    expected = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    assert params_digest(params, []) == expected
    assert (
        params_digest({"amount": 12, "name": "Zoë"}, ["name", "amount"])
        == (hashlib.sha256('{"amount":12,"name":"Zoë"}'.encode()).hexdigest()[:16])
    )


def test_key_order_does_not_matter_at_any_depth() -> None:
    one = {"a": 1, "b": {"x": 1, "y": [{"p": 1, "q": 2}]}}
    two = {"b": {"y": [{"q": 2, "p": 1}], "x": 1}, "a": 1}
    assert params_digest(one, []) == params_digest(two, [])
    assert params_digest(one, ["b", "a"]) == params_digest(two, ["a", "b"])


def test_integral_floats_digest_like_integers() -> None:
    assert params_digest({"n": 3}, ["n"]) == params_digest({"n": 3.0}, ["n"])
    assert params_digest({"n": [1, {"m": -2}]}, []) == params_digest({"n": [1.0, {"m": -2.0}]}, [])
    assert params_digest({"n": 0}, []) == params_digest({"n": -0.0}, [])
    assert params_digest({"n": 3}, []) != params_digest({"n": 3.5}, [])


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
    assert params_digest(one, []) != params_digest(two, [])
    assert params_digest(one, ["n"]) != params_digest(two, ["n"])


def test_parameters_outside_the_whitelist_never_change_the_digest() -> None:
    whitelist = ["to", "template", "vars.first_name"]
    base = {"to": "+33600000000", "template": "reminder", "vars": {"first_name": "Zoë"}}
    digest = params_digest(base, whitelist)
    noisy = {
        **base,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "retry_count": 3.0,
        "vars": {"first_name": "Zoë", "sent_at": "2026-11-30T05:00:00Z"},
    }
    assert params_digest(noisy, whitelist) == digest
    assert params_digest({**noisy, "retry_count": 4.0}, whitelist) == digest
    # A whitelisted parameter does change it, nested ones included.
    assert params_digest({**base, "to": "+33600000001"}, whitelist) != digest
    assert params_digest({**base, "vars": {"first_name": "Zoe"}}, whitelist) != digest


def test_whitelist_order_and_repeats_do_not_matter() -> None:
    params = {"a": 1, "b": 2, "c": 3}
    assert params_digest(params, ["a", "b"]) == params_digest(params, ["b", "a", "b"])
    assert params_digest(params, ["a", "b"]) != params_digest(params, ["a", "c"])


def test_a_missing_path_is_absent_not_null() -> None:
    whitelist = ["to", "vars.name"]
    absent = params_digest({"to": "x"}, whitelist)
    assert params_digest({"to": "x", "vars": {}}, whitelist) == absent
    assert params_digest({"to": "x", "vars": "not an object"}, whitelist) == absent
    assert params_digest({"to": "x", "vars": {"name": None}}, whitelist) != absent
    assert params_digest({"to": "x", "vars": None}, whitelist) == absent
    assert params_digest({"to": "x"}, ["to", "vars"]) != params_digest(
        {"to": "x", "vars": None}, ["to", "vars"]
    )


def test_an_empty_whitelist_means_every_parameter() -> None:
    assert params_digest({"a": 1, "trace_id": "t1"}, []) != params_digest(
        {"a": 1, "trace_id": "t2"}, []
    )
    assert params_digest({"a": 1}, ()) == params_digest({"a": 1.0}, [])


def test_protobuf_struct_parameters_digest_like_plain_ones() -> None:
    plain = {"to": "a@b.c", "count": 3, "vars": {"items": [1, "x", None, True]}}
    struct = struct_pb2.Struct()
    struct.update(plain)
    assert params_digest(struct, []) == params_digest(plain, [])
    whitelist = ["count", "vars.items", "missing.path"]
    assert params_digest(struct, whitelist) == params_digest(plain, whitelist)


def test_what_cannot_be_digested_is_refused() -> None:
    with pytest.raises(ValueError, match=r"parameter a\.b is not a finite number"):
        params_digest({"a": {"b": math.nan}}, [])
    with pytest.raises(ValueError, match="not a finite number"):
        params_digest({"a": math.inf}, ["a"])
    with pytest.raises(TypeError, match=r"parameter when has a type"):
        params_digest({"when": datetime.datetime(2026, 1, 1)}, [])
    with pytest.raises(TypeError, match="non-string key"):
        params_digest({"a": {1: "x"}}, [])
    for bad in ("", "a..b", ".a", "a."):
        with pytest.raises(ValueError, match="dotted names"):
            params_digest({"a": 1}, [bad])


# --- keys ------------------------------------------------------------------------------


def key(entity_id: str = "order-42", **changes: str) -> IdempotencyKey:
    fields = {
        "tenant": "acme",
        "entity_id": entity_id,
        "action_type": "sms.send",
        "digest": "0123456789abcdef",
        "window": "2026-11-30",
    }
    return IdempotencyKey(**{**fields, **changes})


def test_a_key_renders_as_slash_separated_parts() -> None:
    assert str(key()) == "acme/order-42/sms.send/0123456789abcdef/2026-11-30"


@pytest.mark.parametrize(
    "entity_id",
    ["order-42", "a/b", "/", "50%", "%2F", "a/b%2Fc", "Zoë/🙂", "with space", "?#&=+", "-"],
)
def test_keys_round_trip_through_their_text(entity_id: str) -> None:
    original = key(entity_id, tenant="t/1%", action_type="crm/update é")
    text = str(original)
    assert text.count("/") == 4
    assert text.isascii()
    assert IdempotencyKey.parse(text) == original


def test_a_slash_in_an_entity_cannot_make_two_keys_read_alike() -> None:
    one = key("a/b", action_type="c")
    two = key("a", action_type="b/c")
    assert str(one) != str(two)
    assert str(key("a/b")) == "acme/a%2Fb/sms.send/0123456789abcdef/2026-11-30"
    assert str(key("a%2Fb")) == "acme/a%252Fb/sms.send/0123456789abcdef/2026-11-30"


@pytest.mark.parametrize(
    "text",
    [
        "acme/order-42/sms.send/0123456789abcdef",  # four parts
        "acme/a/b/sms.send/0123456789abcdef/2026-11-30",  # an unencoded slash
        "acme/a%2fb/sms.send/0123456789abcdef/2026-11-30",  # not the canonical spelling
        "acme/a%zz/sms.send/0123456789abcdef/2026-11-30",
        "acme/Zoë/sms.send/0123456789abcdef/2026-11-30",  # unencoded non-ASCII
        "acme/%FF/sms.send/0123456789abcdef/2026-11-30",  # not UTF-8
        "acme//sms.send/0123456789abcdef/2026-11-30",  # empty entity
        "acme/order-42/sms.send/0123456789ABCDEF/2026-11-30",
        "acme/order-42/sms.send/0123456789abcde/2026-11-30",
        "acme/order-42/sms.send/0123456789abcdef/2026-11",
        "acme/order-42/sms.send/0123456789abcdef/2026-W4",
        "acme/order-42/sms.send/0123456789abcdef/",
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
        made.entity_id = "order-43"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.digest = "fedcba9876543210"  # type: ignore[misc]
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        made.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(made, "__dict__")
    assert str(made) == "acme/order-42/sms.send/0123456789abcdef/2026-11-30"
    assert {made: 1}[key()] == 1  # equal keys hash alike


def test_build_key_puts_it_all_together() -> None:
    params = {"to": "+33600000000", "body": "Votre RDV", "trace_id": "abc"}
    whitelist = ["to", "body"]
    built = build_key(
        "acme", "rdv/2026/0042", "sms.send", params, whitelist, at(2026, 11, 30, 5), "day"
    )
    assert built == IdempotencyKey(
        "acme", "rdv/2026/0042", "sms.send", params_digest(params, whitelist), "2026-11-30"
    )
    assert str(built).startswith("acme/rdv%2F2026%2F0042/sms.send/")
    # The same intent later that day, retried with a new trace id: the same key.
    again = {**params, "trace_id": "def", "body": "Votre RDV"}
    assert (
        build_key(
            "acme", "rdv/2026/0042", "sms.send", again, whitelist, at(2026, 11, 30, 18), "day"
        )
        == built
    )
    # The next day, another tenant, another action: other keys.
    assert (
        build_key("acme", "rdv/2026/0042", "sms.send", params, whitelist, at(2026, 12, 1), "day")
        != built
    )
    assert (
        build_key("acme2", "rdv/2026/0042", "sms.send", params, whitelist, at(2026, 11, 30), "day")
        != built
    )
    assert (
        build_key("acme", "rdv/2026/0042", "email.send", params, whitelist, at(2026, 11, 30), "day")
        != built
    )
