"""Personal data written the way people write it, not the way the finders first expected:
other separators (dots, no-break spaces, en dashes, doubled spaces), other digits
(Arabic-Indic, Devanagari, full-width), internationalised e-mail addresses, and a map
whose keys mask to the same token. Each must be masked, and mask to the same token as the
plain form, so masked records stay joinable (reachstore_server/common/pii.py)."""

from __future__ import annotations

import pytest

from reachstore_server.common.pii import Masker

MASKER = Masker(b"s" * 32, persistent=False)
PHONE = MASKER.mask_text("13800138000")
CARD = MASKER.mask_text("4111111111111111")


@pytest.mark.parametrize(
    "written",
    [
        "138.0013.8000",
        "138\u00a00013\u00a08000",  # no-break spaces
        "138\u202f0013\u202f8000",  # narrow no-break spaces
        "138\u20130013\u20138000",  # en dashes
        "138\u20100013\u20108000",  # hyphens (U+2010)
        "138  0013  8000",  # doubled spaces
        "\u0661\u0663\u0668\u0660\u0660\u0661\u0663\u0668\u0660\u0660\u0660",  # Arabic-Indic
        "\u0967\u0969\u096e\u0966\u0966\u0967\u0969\u096e\u0966\u0966\u0966",  # Devanagari
    ],
)
def test_a_mobile_written_otherwise_is_masked_as_the_same_phone(written: str) -> None:
    masked = MASKER.mask_text(f"call {written} today")
    assert masked == f"call {PHONE} today", masked


@pytest.mark.parametrize(
    "written",
    [
        "4111.1111.1111.1111",
        "4111\u00a01111\u00a01111\u00a01111",
        "4111\u20131111\u20131111\u20131111",
    ],
)
def test_a_card_written_otherwise_is_masked_as_the_same_card(written: str) -> None:
    assert MASKER.mask_text(f"card {written}.") == f"card {CARD}.", written


@pytest.mark.parametrize("address", ["用户@例子.中国", "josé@exämple.com", "Anna.Müller@straße.de"])
def test_an_internationalised_email_is_masked(address: str) -> None:
    masked = MASKER.mask_text(f"mail {address} please")
    assert masked.startswith("mail [email:") and masked.endswith("] please"), masked
    assert address not in masked


def test_numbers_that_are_not_personal_stay() -> None:
    for text in ("version 1.2.3", "pi 3.14159265358979", "ip 192.168.100.200", "2026-12-06"):
        assert MASKER.mask_text(text) == text


def test_keys_that_mask_alike_keep_every_value() -> None:
    masked = MASKER.mask_value({"13800138000": "first", "138-0013-8000": "second"})
    assert sorted(map(str, masked.values())) == ["first", "second"] or (
        len(masked) == 1 and sorted(next(iter(masked.values()))) == ["first", "second"]
    ), masked
