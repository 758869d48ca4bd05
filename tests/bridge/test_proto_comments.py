"""The proto comments read from the descriptor set that ``make generate`` ships."""

from __future__ import annotations

import fnmatch
import logging
import tomllib
from pathlib import Path

import pytest

from reachstore.common.v1 import partial_failure_pb2 as pf_pb2
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2
from reachstore_server.bridge import proto_comments
from reachstore_server.bridge.proto_comments import ProtoComments, bundled_comments, read_comments

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_set_carries_comments_for_every_kind_of_element() -> None:
    comments = bundled_comments()
    failure = pf_pb2.PartialFailure.DESCRIPTOR
    assert comments.of(failure).startswith("One part of a request that did not succeed")
    assert comments.of(failure.fields_by_name["retryable"]) == (
        "Whether sending the same part again may succeed."
    )
    category = pf_pb2.Category.DESCRIPTOR
    assert comments.of(category).startswith("What kind of problem a failure is.")
    assert comments.of_value(category.values_by_name["CATEGORY_QUOTA"]).startswith(
        "A limit was reached"
    )
    service = reach_pb2.DESCRIPTOR.services_by_name["ReachService"]
    assert comments.of(service).startswith("ReachService accepts tasks")
    assert all(comments.of(method) for method in service.methods)


def test_wrapped_comment_lines_are_joined_and_paragraphs_kept() -> None:
    assert proto_comments._tidy(" One\n two.\n\n Next\n paragraph:\n - a\n - b\n") == (
        "One two.\n\nNext paragraph:\n- a\n- b"
    )


def test_a_missing_descriptor_set_gives_no_comments_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=proto_comments.__name__):
        comments = read_comments(tmp_path / "descriptors.binpb")
    assert comments == ProtoComments()
    assert comments.of(pf_pb2.PartialFailure.DESCRIPTOR) == ""
    assert "make generate" in caplog.text


def test_a_corrupt_descriptor_set_gives_no_comments(tmp_path: Path) -> None:
    broken = tmp_path / "descriptors.binpb"
    broken.write_bytes(b"\xff\xff\xff not a descriptor set")
    assert read_comments(broken) == ProtoComments()


def test_descriptor_set_is_package_data() -> None:
    # An installed bridge (not an editable one) must find the file next to its module.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["reachstore_server"]
    assert any(fnmatch.fnmatch("bridge/descriptors.binpb", pattern) for pattern in patterns)
    assert (ROOT / "reachstore_server" / "bridge" / proto_comments.DESCRIPTOR_SET).is_file()
