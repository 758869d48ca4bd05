"""The name `reachstore up` gives its ingest process in task leases."""

from __future__ import annotations

from pathlib import Path

from reachstore_server.cli import up_ingest_name


def test_one_data_folder_keeps_its_name_across_starts_and_two_folders_differ(
    tmp_path: Path,
) -> None:
    name = up_ingest_name(tmp_path / "one")
    assert name == up_ingest_name(tmp_path / "one")
    assert name != up_ingest_name(tmp_path / "two")
    # Lease tokens keep the first 40 characters of a name: all of this one.
    assert len(name) <= 40
