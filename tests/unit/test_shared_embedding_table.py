"""The embedding table shared through a file (services/embedding/shared_table.py): one
file, mapped read-only, and never trusted further than it matches the loaded table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.embedding.shared_table import mapped_copy


@pytest.fixture()
def table() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, size=(1000, 64), dtype=np.uint8)


def test_two_processes_worth_of_calls_map_one_file(tmp_path: Path, table: np.ndarray) -> None:
    path = tmp_path / "run" / "table.npy"
    first = mapped_copy(table, path)
    written = path.stat().st_mtime_ns
    second = mapped_copy(table.copy(), path)
    assert isinstance(first, np.memmap) and isinstance(second, np.memmap)
    assert path.stat().st_mtime_ns == written  # the second found it and did not rewrite it
    np.testing.assert_array_equal(first, table)
    np.testing.assert_array_equal(second, table)
    assert not first.flags.writeable
    assert [p.name for p in path.parent.iterdir()] == ["table.npy"]  # no temporary left


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_an_edited_file_is_rewritten_not_used(tmp_path: Path, table: np.ndarray) -> None:
    path = tmp_path / "table.npy"
    mapped_copy(table, path)
    _flip_last_byte(path)
    got = mapped_copy(table, path)
    np.testing.assert_array_equal(got, table)
    np.testing.assert_array_equal(np.load(path), table)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(p.read_bytes()[:100]),  # truncated
        lambda p: p.write_bytes(b"not a numpy file"),
        lambda p: np.save(p, np.zeros((1000, 64), dtype=np.int16)),  # another dtype
        lambda p: np.save(p, np.zeros((999, 64), dtype=np.uint8)),  # another shape
    ],
)
def test_a_spoiled_file_is_rewritten(tmp_path: Path, table: np.ndarray, spoil) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "table.npy"
    mapped_copy(table, path)
    spoil(path)
    np.testing.assert_array_equal(mapped_copy(table, path), table)
    np.testing.assert_array_equal(np.load(path), table)


def test_a_folder_that_cannot_be_made_keeps_the_process_own_copy(
    tmp_path: Path, table: np.ndarray
) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the folder should be")
    got = mapped_copy(table, blocker / "table.npy")
    assert got is table
