"""The keyed personal-data masker: what it finds, what it leaves alone, and its tokens."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.pii import (
    TOKEN,
    Masker,
    bounded,
    default_masker,
    is_sensitive_field,
    masker_from_env,
)

SECRET = b"a test secret of 32 bytes, fixed"
M = Masker(SECRET)


def tok(kind: str, normalised: str, secret: bytes = SECRET) -> str:
    """The expected token, computed independently of the masker."""
    digest = hmac.new(secret, f"{kind}:{normalised}".encode(), hashlib.sha256).hexdigest()
    return f"[{kind}:{digest[:8]}]"


def id_check(first17: str) -> str:
    """ISO 7064 MOD 11-2 check character of a resident ID number."""
    weights = [2 ** (17 - i) % 11 for i in range(17)]
    return "10X98765432"[sum(int(c) * w for c, w in zip(first17, weights, strict=True)) % 11]


def luhn_complete(prefix: str) -> str:
    """``prefix`` followed by the digit that makes it Luhn-valid."""
    for d in "0123456789":
        digits = prefix + d
        total = sum(
            (2 * int(c) - 9 if 2 * int(c) > 9 else 2 * int(c)) if i % 2 else int(c)
            for i, c in enumerate(reversed(digits))
        )
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


PHONE = tok("phone", "+8613800138000")
MAIL = tok("email", "zhang.san@example.com")
CN_ID = tok("cn_id", "11010519491231002X")
VISA = tok("card", "4111111111111111")


# --- realistic text ------------------------------------------------------------------


def test_a_chinese_sentence() -> None:
    text = "请联系 138-0013-8000 或 zhang.san@example.com，身份证 11010519491231002X"
    assert M.mask_text(text) == f"请联系 {PHONE} 或 {MAIL}，身份证 {CN_ID}"


def test_an_english_sentence() -> None:
    text = (
        "Hi, I'm John (john.doe+orders@Mail.Example.co.uk). Call me on +1 (415) 555-2671 "
        "or +44 20 7946 0958; pay with 4111 1111 1111 1111."
    )
    assert M.mask_text(text) == (
        f"Hi, I'm John ({tok('email', 'john.doe+orders@mail.example.co.uk')}). Call me on "
        f"{tok('phone', '+14155552671')} or {tok('phone', '+442079460958')}; pay with {VISA}."
    )


def test_pii_glued_to_chinese_characters_is_found() -> None:
    text = "手机13800138000，邮箱zhang.san@example.com。卡号4111111111111111谢谢"
    assert M.mask_text(text) == f"手机{PHONE}，邮箱{MAIL}。卡号{VISA}谢谢"


def test_full_width_digits_and_at_sign_join_with_ascii_ones() -> None:
    assert M.mask_text("电话：１３８００１３８０００") == f"电话：{PHONE}"
    assert M.mask_text("ｚｈａｎｇ.ｓａｎ＠ｅｘａｍｐｌｅ.ｃｏｍ") == MAIL


# --- phone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "13800138000",
        "138 0013 8000",
        "138-0013-8000",
        "+86 138 0013 8000",
        "+86-138-0013-8000",
        "+8613800138000",
        "8613800138000",
        "0086 13800138000",
        "0086-138-0013-8000",
    ],
)
def test_every_way_of_writing_a_chinese_mobile_joins(written: str) -> None:
    assert M.mask_text(f"tel: {written}.") == f"tel: {PHONE}."


@pytest.mark.parametrize(
    ("written", "digits"),
    [
        ("+1 (415) 555-2671", "14155552671"),
        ("+44 20 7946 0958", "442079460958"),
        ("+49-30-123456", "4930123456"),
        ("+33.1.23.45.67.89", "33123456789"),
        ("+12345678", "12345678"),
        ("+123456789012345", "123456789012345"),
    ],
)
def test_international_numbers(written: str, digits: str) -> None:
    assert M.mask_text(f"call {written} now") == f"call {tok('phone', '+' + digits)} now"


def test_digits_past_fifteen_are_another_number() -> None:
    assert M.mask_text("+44 20 7946 0958 1234") == f"{tok('phone', '+442079460958')} 1234"


# --- cn_id ---------------------------------------------------------------------------


def test_resident_id_numbers() -> None:
    digit_check = "44030419850615" + "123"
    valid = digit_check + id_check(digit_check)
    assert M.mask_text(f"ID {valid}") == f"ID {tok('cn_id', valid)}"
    assert M.mask_text("11010519491231002x") == CN_ID  # a lowercase check x joins
    assert M.mask_text("110105 19491231 002X") == CN_ID


# --- email ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    ["Zhang.San@Example.COM", "zhang.san@example.com", "<zhang.san@example.com>"],
)
def test_emails_join_whatever_their_case(written: str) -> None:
    assert M.mask_text(written).strip("<>") == MAIL


def test_an_email_that_holds_a_phone_number_is_one_email() -> None:
    assert M.mask_text("13800138000@qq.com") == tok("email", "13800138000@qq.com")


# --- card ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "digits"),
    [
        ("4111 1111 1111 1111", "4111111111111111"),
        ("4111-1111-1111-1111", "4111111111111111"),
        ("5555555555554444", "5555555555554444"),
        ("3782 822463 10005", "378282246310005"),
        ("2223 0031 2200 3222", "2223003122003222"),
        ("4222222222222", "4222222222222"),
    ],
)
def test_cards(written: str, digits: str) -> None:
    assert M.mask_text(f"card: {written}") == f"card: {tok('card', digits)}"


def test_nineteen_digit_card() -> None:
    number = luhn_complete("621700000000000000")
    grouped = " ".join([number[:4], number[4:8], number[8:12], number[12:16], number[16:]])
    assert M.mask_text(grouped) == tok("card", number)


def test_a_card_between_short_numbers() -> None:
    assert M.mask_text("No 3 4111 1111 1111 1111 5 items") == f"No 3 {VISA} 5 items"


# --- near misses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # Luhn-invalid
        "4111111111111112",
        "110105194912310021",  # bad ID checksum
        "11010519491331002X",  # month 13
        "110105194902300027",  # 30 February
        "123456789012345678",  # 18 random digits: bad checksum, no date, no card
        "12345678901",  # 11 digits starting 12
        "1380013800",  # 10 digits
        "138001380001",  # 12 digits
        "123413800138000",  # a mobile inside a longer digit run
        "ORD20261130000123",
        "order 20261130000123 placed",
        "20261130123456",  # timestamp
        "192.168.1.1",
        "10.138.0.1",
        "version 1.2.3",
        "v13800138000",
        "13800138000.5",
        "0.13800138000",
        "2026-11-30T12:34:56+08:00",
        "2026-11-30 12:34:56.789",
        "1 2 3 4 5 6 7 8 9 0 1 2 3 4 5",
        "+0800",
        "+1234567",  # 7 digits
        "+12345678901234567890",
        "user@localhost",
        "not an @ address",
        "@@@@",
        "price 1,380,013,800",
        "trace 4bf92f3577b34da6a3ce929d0e0e4736",
        "uuid 41111111-1111-1111-1111-111111111111",  # a Luhn-valid 16 digits inside
        "4111 1111 11111111",  # an 8-digit group is no card group
    ],
)
def test_near_misses_are_left_alone(text: str) -> None:
    assert M.mask_text(text) == text


# --- tokens --------------------------------------------------------------------------


def test_tokens_are_keyed_joinable_and_do_not_hold_the_value() -> None:
    assert M.mask_text("13800138000") == Masker(SECRET).mask_text("138 0013 8000")
    other = Masker(b"another secret, also 32 bytes!!")
    assert other.mask_text("13800138000") == tok(
        "phone", "+8613800138000", b"another secret, also 32 bytes!!"
    )
    assert other.mask_text("13800138000") != M.mask_text("13800138000")
    assert re.fullmatch(r"\[phone:[0-9a-f]{8}\]", PHONE)
    assert "0013" not in M.mask_text("138 0013 8000")


def test_masking_masked_text_changes_nothing() -> None:
    text = (
        "请联系 138-0013-8000 或 zhang.san@example.com，身份证 11010519491231002X，"
        "card 4111 1111 1111 1111, +44 20 7946 0958"
    )
    once = M.mask_text(text)
    assert M.mask_text(once) == once
    assert Masker(b"a different secret entirely!!!!!").mask_text(once) == once


def test_empty_and_plain_text_come_back_unchanged() -> None:
    assert M.mask_text("") == ""
    plain = "Nothing personal here, just words."
    assert M.mask_text(plain) is plain


def test_a_masker_needs_a_secret_and_never_shows_it() -> None:
    with pytest.raises(ValueError):
        Masker(b"")
    assert "secret" not in repr(M).replace("persistent", "")
    assert SECRET.decode() not in repr(M)


# --- field names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "name",
        "full_name",
        "customer_name",
        "first_name",
        "customerName",
        "FirstName",
        "address",
        "shipping-address",
        "billing.addr",
        "token",
        "access_token",
        "password",
        "passwd",
        "client_secret",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "Authorization",
        "phone",
        "mobile",
        "contact_phone",
        "email",
        "e-mail",
        "id_card",
        "id_number",
        "IDNumber",
        "username",
        "客户姓名",
        "手机号",
        "收货地址",
        "entity_id",
        "entityId",
    ],
)
def test_sensitive_field_names(name: str) -> None:
    assert is_sensitive_field(name)


@pytest.mark.parametrize(
    "name",
    [
        "channel_name",
        "channelName",
        "namespace_name",
        "action_name",
        "file_name",
        "host_name",
        "method_name",
        "service_name",
        "key_name",
        "namespace",
        "page_token",
        "next_page_token",
        "max_tokens",
        "key_id",
        "idempotency_key",
        "status",
        "id",
        "renamed",
        "entity",
        "task_id",
    ],
)
def test_names_that_are_not_personal(name: str) -> None:
    assert not is_sensitive_field(name)


# --- structured data -----------------------------------------------------------------


def test_mask_value_walks_nested_json() -> None:
    event = {
        "channel_name": "sms",
        "customer": {
            "name": "张三",
            "address": {"city": "北京", "street": "长安街 1 号"},
            "contact": "请联系 138-0013-8000",
            "email": "Zhang.San@Example.com",
            "phone": 13800138000,
            "tags": ["vip", "zhang.san@example.com"],
        },
        "items": [{"sku": "A-1", "qty": 2, "price": 9.5}],
        "count": 3,
        "ok": True,
        "note": None,
        "password": None,
        "verified_phone": True,
        "by_mail": {"zhang.san@example.com": 1},
        "pair": ("13800138000", 1),
    }
    assert M.mask_value(event) == {
        "channel_name": "sms",
        "customer": {
            "name": tok("field", "张三"),
            "address": tok("field", '{"city": "北京", "street": "长安街 1 号"}'),
            "contact": f"请联系 {PHONE}",
            "email": MAIL,  # one recognisable item: joins with the same e-mail in text
            "phone": PHONE,
            "tags": ["vip", MAIL],
        },
        "items": [{"sku": "A-1", "qty": 2, "price": 9.5}],
        "count": 3,
        "ok": True,
        "note": None,
        "password": None,  # null and true/false say nothing
        "verified_phone": True,
        "by_mail": {MAIL: 1},
        "pair": [PHONE, 1],
    }


def test_a_sensitive_value_masks_whole() -> None:
    masked = M.mask_value({"full_name": "John  Doe", "token": 12345, "secret": ["a", "b"]})
    assert masked == {
        "full_name": tok("field", "John Doe"),
        "token": tok("field", "12345"),
        "secret": tok("field", '["a", "b"]'),
    }


def test_numbers_shaped_like_pii_are_masked_anywhere() -> None:
    assert M.mask_value([13800138000, 13800138000.0, 4111111111111111, 20261130123456]) == [
        PHONE,
        PHONE,
        VISA,
        20261130123456,
    ]
    assert M.mask_value(3.25) == 3.25
    assert M.mask_value([10**400, float("inf")]) == [10**400, float("inf")]
    assert M.mask_value({"token": 10**5000})["token"].startswith("[field:")


def test_a_negative_number_is_masked_as_its_digits_are_in_text() -> None:
    # mask_text("-13800138000") masks the digits after the sign; the number must not keep them.
    assert M.mask_text("-13800138000") == f"-{PHONE}"
    assert M.mask_value([-13800138000, -13800138000.0, -4111111111111111]) == [PHONE, PHONE, VISA]


def test_a_double_past_2_53_is_masked_whatever_its_digits() -> None:
    # A JSON number is a double (google.protobuf.Struct): an 18-digit resident ID or a 17- or
    # 19-digit card sent as a number arrives rounded, fails its check digit, and would be
    # stored with its first 16 digits. Its exact value is gone anyway: it is masked whole.
    resident_id = 440304198510153219
    card = 62170000123456786
    for sent in (float(resident_id), float(card), float(6217000012345678907), -float(card)):
        masked = M.mask_value({"ref": sent})["ref"]
        assert isinstance(masked, str) and masked.startswith("[field:"), (sent, masked)
    # Exact integers keep going through the finders, and small doubles stay numbers.
    assert M.mask_value(2.0**53) == 2.0**53
    assert M.mask_value(1733400000000.0) == 1733400000000.0  # a time in milliseconds


def test_mask_value_is_idempotent() -> None:
    event = {"name": "张三", "contact": {"phone": "138 0013 8000"}, "list": ["a@b.co", 5]}
    once = M.mask_value(event)
    assert M.mask_value(once) == once


def test_other_objects_are_masked_as_text() -> None:
    class Contact:
        def __str__(self) -> str:
            return "Contact(13800138000)"

    assert M.mask_value({"c": Contact()}) == {"c": f"Contact({PHONE})"}


# --- bounded -------------------------------------------------------------------------


def test_bounded_masks_short_text_without_cutting() -> None:
    assert bounded("call 13800138000", masker=M) == f"call {PHONE}"
    assert M.bounded("abc", 3) == "abc"


def test_bounded_cuts_with_an_ellipsis_within_the_limit() -> None:
    out = bounded("x" * 600, masker=M)
    assert len(out) == 512
    assert out == "x" * 511 + "…"
    assert bounded("长" * 10, 5, masker=M) == "长长长长…"


def test_bounded_never_leaves_part_of_a_number_or_a_token() -> None:
    text = "x" * 500 + " 13800138000 and more after it"
    for limit in range(495, 530):
        out = bounded(text, limit, masker=M)
        assert len(out) <= limit
        assert "138" not in out.replace(PHONE, "")
        assert "[" not in TOKEN.sub("", out)  # only whole tokens
        assert M.mask_text(out) == out


def test_bounded_with_tiny_limits() -> None:
    assert bounded("13800138000", 0, masker=M) == ""
    assert bounded("13800138000", 1, masker=M) == "…"
    assert bounded("13800138000", 5, masker=M) == "…"


def test_bounded_uses_the_process_masker_by_default() -> None:
    assert bounded("call 13800138000", 512) == f"call {default_masker().mask_text('13800138000')}"


# --- configuration -------------------------------------------------------------------


def test_masker_from_env_with_a_secret() -> None:
    env = {"REACHSTORE_PII_SECRET": "s" * 16}
    first, second = masker_from_env(env), masker_from_env(env)
    assert first.persistent and second.persistent
    assert first.mask_text("13800138000") == second.mask_text("13800138000")
    assert first.mask_text("13800138000") == tok("phone", "+8613800138000", b"s" * 16)


@pytest.mark.parametrize("env", [{}, {"REACHSTORE_PII_SECRET": ""}])
def test_masker_from_env_without_a_secret_is_random_and_says_so(env: dict[str, str]) -> None:
    first, second = masker_from_env(env), masker_from_env(env)
    assert not first.persistent
    assert first.mask_text("13800138000") == first.mask_text("138 0013 8000")
    assert first.mask_text("13800138000") != second.mask_text("13800138000")


@pytest.mark.parametrize("value", ["short", "s" * 15, "密" * 5])
def test_a_short_secret_is_a_config_error_that_does_not_echo_it(value: str) -> None:
    with pytest.raises(ConfigError, match="REACHSTORE_PII_SECRET must be at least 16 bytes") as e:
        masker_from_env({"REACHSTORE_PII_SECRET": value})
    assert value not in str(e.value)


def test_the_secret_length_counts_utf8_bytes() -> None:
    assert masker_from_env({"REACHSTORE_PII_SECRET": "密" * 6}).persistent  # 18 bytes


# --- cost ----------------------------------------------------------------------------


# Speed is measured by bench/bench_pii.py (ratios against a plain regex pass in the same
# run); these tests check what masking does to large and hostile input, and that it ends.
HANG_GUARD_S = 20.0  # linear masking takes well under 2 s here even on a busy machine;
# catastrophic backtracking on 50,000 characters would take far longer than this


def _masked_within_guard(text: str) -> str:
    started = time.perf_counter()
    masked = M.mask_text(text)
    assert time.perf_counter() - started < HANG_GUARD_S
    return masked


def test_100_kb_of_log_text_is_masked_throughout() -> None:
    line = (
        "2026-11-30T12:34:56Z order ORD20261130000123 for 张三 (zhang.san@example.com, "
        "138-0013-8000) paid 4111 1111 1111 1111, v1.2.3 from 192.168.1.1\n"
    )
    text = line * (100_000 // len(line))
    masked = _masked_within_guard(text)
    for raw in ("zhang.san@example.com", "138-0013-8000", "4111 1111 1111 1111"):
        assert raw not in masked
    # Not personal data: kept readable on every line.
    assert masked.count("ORD20261130000123") == text.count("ORD20261130000123")
    assert masked.count("v1.2.3") == text.count("v1.2.3")


@pytest.mark.parametrize(
    "text",
    [
        "1" * 50_000,
        "@" * 50_000,
        "a" * 50_000,
        "a@" * 25_000,
        "x@" + "a." * 25_000,
        "1 " * 25_000,
        "1-" * 25_000,
        "1234 " * 10_000,
        "+1" * 25_000,
        "+1 " * 25_000,
        ".1" * 25_000,
        "1" * 17 + "X" + "1" * 50_000,
    ],
)
def test_pathological_input_does_not_hang_the_masker(text: str) -> None:
    _masked_within_guard(text)


def test_tokens_match_the_exported_pattern() -> None:
    masked = M.mask_value(
        {"a": "13800138000 zhang.san@example.com 11010519491231002X 4111111111111111", "name": 1}
    )
    found: Any = TOKEN.findall(" ".join(masked.values()))
    assert len(found) == 5


def test_a_json_answer_is_masked_field_by_field() -> None:
    masker = Masker(b"answer-masking-secret")
    answer = '{"id": "task-1", "echo": {"customer_name": "Zhang San", "note": "call 13800138000"}}'
    masked = masker.bounded_answer(answer, 512)
    assert "Zhang San" not in masked and "13800138000" not in masked
    assert '"id": "task-1"' in masked and "[field:" in masked and "[phone:" in masked
    assert masker.bounded_answer("plain 13800138000", 512).startswith("plain [phone:")
    assert len(masker.bounded_answer('{"a": "' + "x" * 2000 + '"}', 100)) <= 100


def test_log_lines_are_masked_with_the_same_masker() -> None:
    import logging

    from reachstore_server.common.logs import JsonFormatter

    masker = Masker(b"log-masking-secret-0")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "from %s", ("13800138000",), None)
    line = JsonFormatter("test", masker).format(record)
    assert "13800138000" not in line
    assert masker.mask_text("13800138000") in line  # the same token as receipts and the trail


def test_the_shortcut_never_skips_a_match() -> None:
    """``mask_text`` skips the finders when a text has no "@", no "+" and no run of digits
    long enough for any of them; on random texts built from the characters the finders
    look for, whenever it would skip, no finder finds anything."""
    import random

    from reachstore_server.common.pii import _FINDERS, _may_hold_personal_data, _suspect_spots

    rng = random.Random(20261202)
    skipped = 0
    for alphabet, longest in (
        ("0123456789" * 4 + "+ -.()xX@" + "ab", 24),
        # No "@" nor "+": only the runs decide, over texts long enough to hold any kind.
        ("0123456789" * 6 + "1" * 6 + "  --.,()xXab", 40),
    ):
        for _ in range(30_000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest)))
            may = _may_hold_personal_data(text)
            assert may == bool(_suspect_spots(text)), text
            if may:
                continue
            skipped += 1
            found = [span for find in _FINDERS for span in find(text)]
            assert not found, (text, found)
    assert skipped > 10_000  # the check above ran on many texts the shortcut skips
    # Each kind at its fewest digits is still looked for.
    for text in ("+1 415 555", "13812345678", "138 1234 5678", "4111111111111111", "a@b.io"):
        assert _may_hold_personal_data(text), text
    # Order numbers, dates and amounts are not.
    for text in ("ORD-2026-00012345", "2026-12-05T01:08:23.007Z", "12345.50", "v1.2.3"):
        assert not _may_hold_personal_data(text), text


# --- many values in one pass --------------------------------------------------------------

_PII = ["13800138000", "zhang.san@example.com", "+44 20 7946 0958", "4111 1111 1111 1111",
        "11010519491231002X", "１３８００１３８０００", "[phone:0a1b2c3d]", "ORD-2026-00012345",
        "138 0013 8000", "12345678901234", "k-1", "", "订单"]  # fmt: skip
_KEYS = ["note", "phone", "customerName", "order_id", "items", "entity_id", "channel_name"]


def _json_like() -> Any:
    from hypothesis import strategies as st

    text = st.one_of(st.sampled_from(_PII), st.text(max_size=12))
    leaf = st.one_of(
        text, st.none(), st.booleans(), st.integers(-(10**21), 10**21), st.floats(),
        st.sampled_from([13800138000, 13800138000.0, 4111111111111111.0, 1.5e19]),
    )  # fmt: skip
    key = st.one_of(st.sampled_from(_KEYS), st.sampled_from(_PII), st.text(max_size=6))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=4)
        ),
        max_leaves=12,
    )


def test_mask_json_is_canonical_json_of_mask_value() -> None:
    """The one-pass check over a batch may only skip what ``mask_value`` leaves as it is:
    for any JSON-like values, each text is the canonical JSON of the value masked on its
    own."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from reachstore_server.common.canonical import canonical_json

    @settings(max_examples=400, deadline=None)
    @given(st.lists(_json_like(), min_size=1, max_size=6))
    def check(values: list[Any]) -> None:
        assert M.mask_json(values) == [canonical_json(M.mask_value(v)) for v in values]

    check()


def test_mask_texts_masks_each_text_as_mask_text_does() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.one_of(st.sampled_from(_PII), st.text(max_size=20)), max_size=12))
    def check(texts: list[str]) -> None:
        assert M.mask_texts(texts) == [M.mask_text(t) for t in texts]

    check()


def test_one_raw_value_among_many_clean_ones_is_masked() -> None:
    clean = {"channel": "sms", "params": {"phone": "[phone:0a1b2c3d]", "order": "ORD-1"}}
    values = [clean] * 50 + [{"note": "call 13800138000"}] + [clean] * 50
    masked = M.mask_json(values)
    assert masked[50] == '{"note":"call ' + PHONE + '"}'
    assert masked[:50] == masked[51:] == [canonical_json_of(clean)] * 50
    texts = ["k-1"] * 30 + ["zhang.san@example.com"] + ["k-2"] * 30
    assert M.mask_texts(texts) == ["k-1"] * 30 + [MAIL] + ["k-2"] * 30


def canonical_json_of(value: Any) -> str:
    from reachstore_server.common.canonical import canonical_json

    return canonical_json(value)
