"""Fixtures exposing the real peers of ``tests/reach/peers.py``, and an action builder."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reachstore_server.reach.channels.base import Outgoing

from .peers import (
    GrpcReceiver,
    HttpReceiver,
    SmtpReceiver,
    closed_port,
    self_signed_cert,
)

_numbers = itertools.count(1)


def make_action(params: dict[str, Any] | None = None, **fields: Any) -> Outgoing:
    """An action with unique ids (and a trace id of 32 lowercase hex digits)."""
    n = next(_numbers)
    values: dict[str, Any] = {
        "action_id": f"act-{n}",
        "idempotency_key": f"key-{n}",
        "action_type": "ticket.assign",
        "params": params if params is not None else {"ticket": "T-1"},
        "trace_id": f"{n:032x}",
        "tenant": "acme",
        "entity_id": "ticket-1",
    }
    values.update(fields)
    return Outgoing(**values)


@pytest.fixture
def http_receiver() -> Iterator[HttpReceiver]:
    """A plain HTTP receiver: every delivery takes effect, keys are not deduplicated."""
    with HttpReceiver() as receiver:
        yield receiver
    assert not receiver.errors, receiver.errors


@pytest.fixture
def deduping_receiver() -> Iterator[HttpReceiver]:
    """An HTTP receiver that honours Idempotency-Key like a well-behaved provider."""
    with HttpReceiver(dedupe=True) as receiver:
        yield receiver
    assert not receiver.errors, receiver.errors


@pytest.fixture
def smtp_receiver() -> Iterator[SmtpReceiver]:
    with SmtpReceiver() as receiver:
        yield receiver


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    """A gRPC receiver with server reflection."""
    with GrpcReceiver() as receiver:
        yield receiver


@pytest.fixture
def unreachable_port() -> Iterator[int]:
    """A port on 127.0.0.1 where connecting is refused."""
    with closed_port() as port:
        yield port


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and key for 127.0.0.1 (skips when openssl is missing)."""
    made = self_signed_cert(tmp_path_factory.mktemp("tls"))
    if made is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    return made
