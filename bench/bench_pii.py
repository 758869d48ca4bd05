"""How fast personal data is masked: 100 KB of log-like text, and the inputs built to make
a careless pattern backtrack.

Every audit event's parameters and every log line pass through the masker, so its cost
matters and must grow linearly with the text. The baseline, measured in the same run, is
one pass of a trivial regular expression (``\\d`` → ``#``) over the same text: the ratio
says how many such passes one masking costs.

    .venv/bin/python bench/bench_pii.py [--runs 5]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

from reachstore_server.common.pii import Masker

LINE = (
    "2026-11-30T12:34:56Z order ORD20261130000123 for 张三 (zhang.san@example.com, "
    "138-0013-8000) paid 4111 1111 1111 1111, v1.2.3 from 192.168.1.1\n"
)
# Inputs shaped to make a backtracking pattern blow up (long digit runs, separators,
# half-made e-mail addresses); each must cost about as much as ordinary text.
PATHOLOGICAL = {
    "digits": "1" * 50_000,
    "at signs": "@" * 50_000,
    "letters": "a" * 50_000,
    "a@ repeated": "a@" * 25_000,
    "dotted local part": "x@" + "a." * 25_000,
    "digit, space": "1 " * 25_000,
    "digit, dash": "1-" * 25_000,
    "card-like groups": "1234 " * 10_000,
    "plus, digit": "+1" * 25_000,
    "dot, digit": ".1" * 25_000,
    "id-like then digits": "1" * 17 + "X" + "1" * 50_000,
}
DIGIT = re.compile(r"\d")


def fastest(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs")
    args = parser.parse_args(argv)
    masker = Masker(b"bench-pii-secret")
    print(f"{'input':24} {'chars':>8} {'mask ms':>9} {'baseline ms':>12} {'ratio':>7}")
    cases = {"100 KB of log lines": (LINE * (100_000 // len(LINE) + 1))[:100_000]}
    cases.update(PATHOLOGICAL)
    for name, text in cases.items():
        masked = fastest(lambda t=text: masker.mask_text(t), args.runs)
        baseline = fastest(lambda t=text: DIGIT.sub("#", t), args.runs)
        print(
            f"{name:24} {len(text):>8,} {masked * 1000:>9.2f} {baseline * 1000:>12.2f} "
            f"{masked / baseline:>7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
