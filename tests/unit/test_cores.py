"""``usable_cores``: the CPU list capped by a control group's CPU quota, read from files
laid out as cgroup v2 and v1 lay them out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reachstore_server.common.cores import usable_cores

CPUS = len(os.sched_getaffinity(0))


def test_without_a_quota_it_is_the_cpu_list(tmp_path: Path) -> None:
    assert usable_cores(tmp_path) == CPUS
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == CPUS


@pytest.mark.parametrize(("quota", "expected"), [("50000 100000", 1), ("100000 100000", 1)])
def test_a_v2_quota_caps_it(tmp_path: Path, quota: str, expected: int) -> None:
    (tmp_path / "cpu.max").write_text(quota + "\n")
    assert usable_cores(tmp_path) == min(CPUS, expected)


def test_a_quota_above_the_cpu_list_does_not_raise_it(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text(f"{(CPUS + 3) * 100000} 100000\n")
    assert usable_cores(tmp_path) == CPUS


def test_a_v1_quota_caps_it_and_minus_one_is_none(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    assert usable_cores(tmp_path) == min(CPUS, 2)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert usable_cores(tmp_path) == CPUS
