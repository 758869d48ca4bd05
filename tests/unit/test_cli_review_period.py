"""`reachstore reach unknowns --since PERIOD`: a period the review cannot cover is refused on
the command line, naming the rule, not sent (reachstore_server/cli_client/reach.py)."""

from __future__ import annotations

import argparse

import pytest

from reachstore_server.cli_client.reach import MAX_REVIEW_S, duration_s


def test_periods_with_units() -> None:
    assert duration_s("7d") == 7 * 86400
    assert duration_s("36h") == 36 * 3600
    assert duration_s("90d") == MAX_REVIEW_S


@pytest.mark.parametrize("text", ["99999999999999999999999d", "91d", "13w", "8000000s"])
def test_a_period_beyond_the_review_is_refused_naming_the_limit(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="at most 90d"):
        duration_s(text)


@pytest.mark.parametrize("text", ["", "0d", "-1d", "seven", "7y"])
def test_what_is_not_a_period_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a period"):
        duration_s(text)
