"""The gRPC channel against a real gRPC server on 127.0.0.1, with and without reflection."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import (
    Answer,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.grpc_call import GrpcCallChannel
from tests.e2e.tls_certs import CertSet, write_cert_set

from .conftest import make_action
from .peers import ASSIGN_METHOD, GrpcReceiver

T = TypeVar("T")
TICKET = {"ticket": "T-42", "group": "network", "count": 3}


def channel_for(target: str, **settings: Any) -> GrpcCallChannel:
    """A channel to ``target``; plain text, as the test servers speak, unless ``settings``
    say otherwise (the TLS tests below)."""
    table = {"target": target, "method": ASSIGN_METHOD, "timeout_s": 2.0, "tls": False}
    table.update(settings)
    table = {key: value for key, value in table.items() if value is not None}
    channel = build_channel("grpc", table, "channels.tickets", {"RPC_TOKEN": "t0ken"})
    assert isinstance(channel, GrpcCallChannel)
    return channel


def run(channel: GrpcCallChannel, use: Callable[[GrpcCallChannel], Awaitable[T]]) -> T:
    """Runs ``use(channel)`` in a fresh event loop and closes the channel in it."""

    async def main() -> T:
        try:
            return await use(channel)
        finally:
            await channel.close()

    return asyncio.run(main())


def submit(channel: GrpcCallChannel, action: Outgoing) -> Answer:
    return run(channel, lambda c: c.submit(action))


def submit_error(channel: GrpcCallChannel, action: Outgoing) -> ChannelError:
    with pytest.raises(ChannelError) as caught:
        submit(channel, action)
    return caught.value


@pytest.fixture
def descriptor_set(tmp_path: Path) -> Path:
    with GrpcReceiver(reflection=False) as receiver:
        return receiver.write_descriptor_set(tmp_path / "tickets.binpb")


def test_reflection_mode_makes_a_real_call_with_fields_and_metadata(
    grpc_receiver: GrpcReceiver,
) -> None:
    channel = channel_for(grpc_receiver.target, token_env="RPC_TOKEN", idempotency_metadata=True)
    action = make_action(TICKET)

    answer = submit(channel, action)

    assert answer.status is Status.SUCCESS
    assert answer.external_id == "a-1"  # the response's string field "id"
    assert json.loads(answer.snippet) == {"id": "a-1", "accepted": True}
    assert answer.status_code == 0
    [call] = grpc_receiver.calls
    assert call.request == TICKET
    assert call.metadata["x-reachstore-action-id"] == action.action_id
    assert call.metadata["authorization"] == "Bearer t0ken"
    assert call.metadata["idempotency-key"] == action.idempotency_key
    match = re.fullmatch(r"00-([0-9a-f]{32})-[0-9a-f]{16}-01", call.metadata["traceparent"])
    assert match is not None and match.group(1) == action.trace_id
    assert channel.sends_idempotency_key


def test_descriptor_set_mode_needs_no_reflection(descriptor_set: Path) -> None:
    with GrpcReceiver(reflection=False) as receiver:
        channel = channel_for(receiver.target, descriptor_set=str(descriptor_set))
        channel.validate(make_action(TICKET))  # types known at construction
        answer = submit(channel, make_action(TICKET))
        calls = receiver.calls

    assert answer.status is Status.SUCCESS and answer.external_id == "a-1"
    assert [c.request for c in calls] == [TICKET]
    assert "idempotency-key" not in calls[0].metadata
    assert "authorization" not in calls[0].metadata
    assert not channel.sends_idempotency_key


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"ticket": "T-1", "colour": "red"}, "colour"),
        ({"ticket": "T-1", "count": "many"}, "count"),
        ({"ticket": ["T-1"]}, "ticket"),
    ],
)
def test_bad_params_are_refused_by_validate_once_types_are_known(
    descriptor_set: Path, params: dict[str, Any], field: str
) -> None:
    channel = channel_for("127.0.0.1:1", descriptor_set=str(descriptor_set))

    with pytest.raises(InvalidParams) as caught:
        channel.validate(make_action(params))

    assert caught.value.field == field
    assert "does not fit the request type" in caught.value.rule


def test_start_learns_the_types_through_reflection(grpc_receiver: GrpcReceiver) -> None:
    channel = channel_for(grpc_receiver.target)
    bad = make_action({"ticket": "T-1", "colour": "red"})
    channel.validate(bad)  # the types are not known yet: only JSON-ness is checked

    run(channel, lambda c: c.start())

    with pytest.raises(InvalidParams):
        channel.validate(bad)
    assert grpc_receiver.calls == []  # reflection is not a call to the method


def test_bad_params_at_submit_before_the_types_were_known(grpc_receiver: GrpcReceiver) -> None:
    error = submit_error(channel_for(grpc_receiver.target), make_action({"colour": "red"}))

    assert (error.category, error.code, error.business) == ("permanent", "INVALID_PARAMS", True)
    assert grpc_receiver.calls == []


def test_without_reflection_or_descriptor_set_the_method_is_unimplemented() -> None:
    with GrpcReceiver(reflection=False) as receiver:
        channel = channel_for(receiver.target)
        run(channel, lambda c: c.start())  # best effort: does not raise
        error = submit_error(channel, make_action(TICKET))

    assert (error.category, error.code) == ("permanent", "RECEIVER_UNIMPLEMENTED")
    assert "reflection" in error.message


def test_a_stopped_server_is_unavailable_and_not_ambiguous(descriptor_set: Path) -> None:
    receiver = GrpcReceiver(reflection=False).start()
    channel = channel_for(receiver.target, descriptor_set=str(descriptor_set))

    async def use(c: GrpcCallChannel) -> tuple[Answer, ChannelError]:
        first = await c.submit(make_action(TICKET))
        receiver.stop()
        # The server's GOAWAY and the closed socket reach the client's event loop a moment
        # later; a call started before they do goes out on the dying connection, and is
        # rightly ambiguous. This test is about the server that is already gone.
        await asyncio.sleep(0.3)
        with pytest.raises(ChannelError) as caught:
            await c.submit(make_action(TICKET))
        return first, caught.value

    try:
        first, error = run(channel, use)
    finally:
        receiver.stop()

    assert first.status is Status.SUCCESS
    # No connection could be made: nothing was sent, so not ambiguous.
    assert (error.category, error.code, error.ambiguous) == (
        "transient",
        "RECEIVER_UNREACHABLE",
        False,
    )
    assert error.status_code == 14


def test_reflection_against_nothing_is_unavailable(unreachable_port: int) -> None:
    error = submit_error(channel_for(f"127.0.0.1:{unreachable_port}"), make_action(TICKET))

    assert (error.category, error.code, error.ambiguous) == (
        "transient",
        "RECEIVER_UNREACHABLE",
        False,
    )


@pytest.mark.parametrize(
    ("behaviour", "category", "code", "business", "ambiguous"),
    [
        ("status:INVALID_ARGUMENT:no such group", "permanent", "RECEIVER_REJECTED", True, False),
        ("status:NOT_FOUND", "permanent", "RECEIVER_REJECTED", True, False),
        ("status:UNAUTHENTICATED", "auth", "RECEIVER_AUTH_FAILED", False, False),
        ("status:UNIMPLEMENTED", "permanent", "RECEIVER_UNIMPLEMENTED", False, False),
        ("status:ABORTED", "transient", "RECEIVER_ABORTED", False, False),
        ("status:INTERNAL", "transient", "RECEIVER_ERROR", False, True),
        # The server may have done the work before it went away.
        ("status:UNAVAILABLE", "transient", "RECEIVER_UNAVAILABLE", False, True),
    ],
)
def test_status_codes_are_classified(
    grpc_receiver: GrpcReceiver,
    behaviour: str,
    category: str,
    code: str,
    business: bool,
    ambiguous: bool,
) -> None:
    grpc_receiver.script(behaviour)

    error = submit_error(channel_for(grpc_receiver.target), make_action(TICKET))

    assert (error.category, error.code) == (category, code)
    assert (error.business, error.ambiguous) == (business, ambiguous)
    assert error.retry_after_s is None


def test_rejection_details_reach_the_snippet(grpc_receiver: GrpcReceiver) -> None:
    grpc_receiver.script("status:INVALID_ARGUMENT:no such group")

    error = submit_error(channel_for(grpc_receiver.target), make_action(TICKET))

    assert error.status_code == 3 and error.snippet == "no such group"


def test_resource_exhausted_carries_the_retry_info_delay(grpc_receiver: GrpcReceiver) -> None:
    grpc_receiver.script("exhausted:2.5")

    error = submit_error(channel_for(grpc_receiver.target), make_action(TICKET))

    assert (error.category, error.code, error.status_code) == ("quota", "RECEIVER_RATE_LIMITED", 8)
    assert error.retry_after_s == 2.5


def test_a_deadline_exceeded_is_an_ambiguous_timeout(grpc_receiver: GrpcReceiver) -> None:
    grpc_receiver.script("sleep:3")

    error = submit_error(channel_for(grpc_receiver.target, timeout_s=0.3), make_action(TICKET))

    assert (error.category, error.code, error.ambiguous) == ("timeout", "RECEIVER_TIMEOUT", True)
    assert len(grpc_receiver.calls) == 1


def test_a_descriptor_set_without_the_method_is_a_config_error(descriptor_set: Path) -> None:
    with pytest.raises(ConfigError, match=r"channels\.tickets\.descriptor_set: .*Unassign"):
        build_channel(
            "grpc",
            {
                "target": "127.0.0.1:1",
                "method": "/peer.v1.Tickets/Unassign",
                "descriptor_set": str(descriptor_set),
            },
            "channels.tickets",
            {},
        )


def test_poll_and_cancel_cannot_help(descriptor_set: Path) -> None:
    channel = channel_for("127.0.0.1:1", descriptor_set=str(descriptor_set))

    answer = run(channel, lambda c: c.poll(make_action(TICKET), "a-1"))

    assert answer.status is Status.UNKNOWN and answer.detail
    assert run(channel, lambda c: c.cancel(make_action(TICKET), "a-1")) is False
    assert not channel.can_poll and not channel.can_cancel


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return write_cert_set(tmp_path_factory.mktemp("certs"))


def _tls_receiver(certs: CertSet) -> GrpcReceiver:
    pair = (
        Path(certs.path("server.pem")).read_bytes(),
        Path(certs.path("server.key")).read_bytes(),
    )
    return GrpcReceiver(tls=pair)


def test_tls_is_the_default_and_checks_the_server(certs: CertSet) -> None:
    """Left out, ``tls`` means TLS checked against the system's trust store: a server
    whose certificate a private CA signed gets no call (and so never sees the token)."""
    with _tls_receiver(certs) as receiver:
        error = submit_error(
            channel_for(receiver.target, tls=None, token_env="RPC_TOKEN"), make_action(TICKET)
        )
        assert receiver.calls == []
    assert error.category == "transient"


def test_tls_with_the_ca_file_reaches_the_server_with_its_token(certs: CertSet) -> None:
    with _tls_receiver(certs) as receiver:
        channel = channel_for(receiver.target, tls=True, ca_file=certs.ca, token_env="RPC_TOKEN")
        answer = submit(channel, make_action(TICKET))
        [call] = receiver.calls
    assert answer.status is Status.SUCCESS
    assert call.metadata["authorization"] == "Bearer t0ken"


def test_tls_never_falls_back_to_plain_text() -> None:
    """A plain-text server behind a TLS channel: the token is never sent in clear."""
    with GrpcReceiver() as receiver:
        error = submit_error(
            channel_for(receiver.target, tls=None, token_env="RPC_TOKEN"), make_action(TICKET)
        )
        assert receiver.calls == []
    assert error.category == "transient"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls": False, "ca_file": "ca.pem"}, "channels.tickets.ca_file: needs tls = true"),
        ({"tls": None, "ca_file": "/no/such/ca.pem"}, "channels.tickets.ca_file: cannot read"),
        (
            {"tls": None, "cert_file": "server.pem"},
            "channels.tickets.cert_file and channels.tickets.key_file",
        ),
        ({"tls": "yes"}, "channels.tickets.tls: must be true or false"),
    ],
)
def test_tls_settings_are_checked_at_start(
    certs: CertSet, settings: dict[str, Any], message: str
) -> None:
    def resolve(value: Any) -> Any:
        relative = isinstance(value, str) and value.endswith(".pem") and "/" not in value
        return certs.path(value) if relative else value

    resolved = {key: resolve(value) for key, value in settings.items()}
    with pytest.raises(ConfigError, match=re.escape(message)):
        channel_for("127.0.0.1:1", **resolved)
