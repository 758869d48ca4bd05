"""The bridge holds glibc's mmap threshold at 1 MiB (reachstore_server/common/allocator.py):
this machine's C library is glibc, so the setting must take."""

from __future__ import annotations

from reachstore_server.common import allocator


def test_the_threshold_is_set_on_glibc() -> None:
    assert allocator.map_large_blocks() is True


def test_a_library_without_mallopt_is_left_alone(monkeypatch) -> None:
    monkeypatch.setattr(allocator.ctypes.util, "find_library", lambda name: "libnothere.so.9")
    assert allocator.map_large_blocks() is False
