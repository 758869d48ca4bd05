"""The webhook channel against a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.channels.base import (
    Answer,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.http_dates import retry_after_seconds
from reachstore_server.reach.channels.webhook import WebhookChannel, WebhookOptions

from .conftest import make_action
from .peers import HttpReceiver, http_date, remote_script, remote_stats

T = TypeVar("T")
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01")


def channel_for(receiver: HttpReceiver, **settings: Any) -> WebhookChannel:
    table: dict[str, Any] = {"url": receiver.url, "read_timeout_s": 0.3, **settings}
    channel = build_channel("webhook", table, "channels.hook", {"HOOK_TOKEN": "s3cret"})
    assert isinstance(channel, WebhookChannel)
    return channel


def run(channel: WebhookChannel, use: Callable[[WebhookChannel], Awaitable[T]]) -> T:
    """Runs ``use(channel)`` in a fresh event loop and closes the channel in it."""

    async def main() -> T:
        try:
            return await use(channel)
        finally:
            await channel.close()

    return asyncio.run(main())


def submit(channel: WebhookChannel, action: Outgoing) -> Answer:
    return run(channel, lambda c: c.submit(action))


def submit_error(channel: WebhookChannel, action: Outgoing) -> ChannelError:
    with pytest.raises(ChannelError) as caught:
        submit(channel, action)
    return caught.value


def test_a_2xx_is_success_with_the_receivers_id_and_every_header(
    http_receiver: HttpReceiver,
) -> None:
    channel = channel_for(http_receiver, token_env="HOOK_TOKEN")
    action = make_action({"ticket": "T-7", "notes": "ünïcode", "n": [1, 2]})

    answer = submit(channel, action)

    assert answer.status is Status.SUCCESS
    assert answer.external_id == "task-1"
    assert answer.status_code == 200
    assert '"task-1"' in answer.snippet
    [delivery] = http_receiver.records
    assert delivery.path == "/hook"
    assert delivery.body == {"ticket": "T-7", "notes": "ünïcode", "n": [1, 2]}
    headers = delivery.headers
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["idempotency-key"] == action.idempotency_key
    assert headers["x-reachstore-action-id"] == action.action_id
    assert headers["x-reachstore-action-type"] == "ticket.assign"
    assert headers["content-type"] == "application/json"
    match = TRACEPARENT.fullmatch(headers["traceparent"])
    assert match is not None and match.group(1) == action.trace_id
    assert channel.sends_idempotency_key and not channel.can_poll and not channel.can_cancel


def test_without_the_idempotency_header_and_token_neither_is_sent(
    http_receiver: HttpReceiver,
) -> None:
    channel = channel_for(http_receiver, idempotency_header=False)

    submit(channel, make_action())

    [delivery] = http_receiver.records
    assert "idempotency-key" not in delivery.headers
    assert "authorization" not in delivery.headers
    assert not channel.sends_idempotency_key


def test_a_trace_id_of_the_wrong_shape_still_gives_a_valid_traceparent(
    http_receiver: HttpReceiver,
) -> None:
    submit(channel_for(http_receiver), make_action(trace_id="not-a-trace"))

    match = TRACEPARENT.fullmatch(http_receiver.records[0].headers["traceparent"])
    assert match is not None and match.group(1) != "0" * 32


def test_an_answer_without_an_id_falls_back_to_the_idempotency_key(
    http_receiver: HttpReceiver,
) -> None:
    http_receiver.script("status:204")
    action = make_action()

    answer = submit(channel_for(http_receiver), action)

    assert answer.status is Status.SUCCESS
    assert answer.external_id == action.idempotency_key
    assert answer.status_code == 204


def test_accepted_then_polled_from_pending_to_done(http_receiver: HttpReceiver) -> None:
    http_receiver.script("accept:0.3")
    channel = channel_for(http_receiver, status_url=http_receiver.status_url)
    action = make_action()

    async def use(c: WebhookChannel) -> list[Answer]:
        submitted = await c.submit(action)
        first = await c.poll(action, submitted.external_id)
        await asyncio.sleep(0.35)
        return [submitted, first, await c.poll(action, submitted.external_id)]

    submitted, first, second = run(channel, use)

    assert (submitted.status, submitted.status_code) == (Status.PENDING, 202)
    assert submitted.external_id == "task-1"
    assert first.status is Status.PENDING
    assert second.status is Status.SUCCESS and second.external_id == "task-1"
    assert channel.can_poll


def test_a_2xx_that_already_says_done_is_success_even_with_a_status_url(
    http_receiver: HttpReceiver,
) -> None:
    channel = channel_for(http_receiver, status_url=http_receiver.status_url)

    assert submit(channel, make_action()).status is Status.SUCCESS  # "ok" answers state done


@pytest.mark.parametrize(
    ("status_mode", "expected", "detail"),
    [
        ("state:running", Status.PENDING, ""),
        ("state:FAILED", Status.FAILED, "failed"),
        ("state:completed", Status.SUCCESS, ""),
        ("state:exploded", Status.UNKNOWN, "unrecognised"),
        ("garbage", Status.UNKNOWN, "JSON"),
        ("status:503", Status.UNKNOWN, "503"),
    ],
)
def test_poll_maps_what_the_status_endpoint_says(
    http_receiver: HttpReceiver, status_mode: str, expected: Status, detail: str
) -> None:
    channel = channel_for(http_receiver, status_url=http_receiver.status_url)
    http_receiver.script_status(status_mode)

    answer = run(channel, lambda c: c.poll(make_action(), "task-9"))

    assert answer.status is expected
    assert detail in answer.detail
    assert answer.external_id == "task-9"


def test_poll_of_an_unknown_task_or_an_unreachable_receiver_is_unknown(
    http_receiver: HttpReceiver, unreachable_port: int
) -> None:
    channel = channel_for(http_receiver, status_url=http_receiver.status_url)
    unknown = run(channel, lambda c: c.poll(make_action(), "no-such-task"))
    down = channel_for(
        http_receiver, status_url=f"http://127.0.0.1:{unreachable_port}/t/{{external_id}}"
    )
    unreachable = run(down, lambda c: c.poll(make_action(), "task-1"))
    unconfigured = run(channel_for(http_receiver), lambda c: c.poll(make_action(), "task-1"))

    assert (unknown.status, unknown.status_code) == (Status.UNKNOWN, 404)
    assert unreachable.status is Status.UNKNOWN and "ConnectError" in unreachable.detail
    assert unconfigured.status is Status.UNKNOWN
    assert unconfigured.detail == "no status look-up configured"


def test_the_external_id_cannot_escape_the_status_path(http_receiver: HttpReceiver) -> None:
    channel = channel_for(http_receiver, status_url=http_receiver.status_url)

    answer = run(channel, lambda c: c.poll(make_action(), "../_control/stats"))

    assert answer.status_code == 404  # asked for the task "../_control/stats", not stats


def test_cancel_while_pending_and_too_late(http_receiver: HttpReceiver) -> None:
    http_receiver.script("accept:30")
    channel = channel_for(
        http_receiver, status_url=http_receiver.status_url, cancel_url=http_receiver.cancel_url
    )
    action = make_action()

    async def use(c: WebhookChannel) -> tuple[bool, Answer, bool, bool]:
        task = (await c.submit(action)).external_id
        cancelled = await c.cancel(action, task)
        after = await c.poll(action, task)
        done = (await c.submit(make_action())).external_id  # "ok": done at once
        return cancelled, after, await c.cancel(action, done), await c.cancel(action, "nope")

    cancelled, after, too_late, unknown = run(channel, use)

    assert cancelled is True and channel.can_cancel
    assert after.status is Status.UNKNOWN and "cancelled" in after.detail
    assert too_late is False and unknown is False


def test_cancel_without_a_cancel_url_or_receiver_is_false(unreachable_port: int) -> None:
    with HttpReceiver() as receiver:
        plain = channel_for(receiver)
        down = channel_for(
            receiver, cancel_url=f"http://127.0.0.1:{unreachable_port}/t/{{external_id}}"
        )
        assert run(plain, lambda c: c.cancel(make_action(), "task-1")) is False
        assert run(down, lambda c: c.cancel(make_action(), "task-1")) is False


@pytest.mark.parametrize(
    ("mode", "category", "code", "business", "ambiguous"),
    [
        # A 5xx may come after the action took effect (and a gateway's says nothing of
        # the receiver behind it); a 3xx after a POST is how "done, see there" is said.
        ("status:500", "transient", "RECEIVER_UNAVAILABLE", False, True),
        ("status:503", "transient", "RECEIVER_UNAVAILABLE", False, True),
        ("status:408", "transient", "RECEIVER_UNAVAILABLE", False, False),
        ("status:400", "permanent", "RECEIVER_REJECTED", True, False),
        ("status:422", "permanent", "RECEIVER_REJECTED", True, False),
        # The receiver cannot take a request of this method or form: our setup is wrong,
        # which is for operations, not the business.
        ("status:405", "permanent", "RECEIVER_REJECTED", False, False),
        ("status:415", "permanent", "RECEIVER_REJECTED", False, False),
        ("status:413", "permanent", "RECEIVER_REJECTED", False, False),
        ("status:401", "auth", "RECEIVER_AUTH_FAILED", False, False),
        ("status:403", "auth", "RECEIVER_AUTH_FAILED", False, False),
        ("status:302", "permanent", "RECEIVER_REDIRECTED", False, True),
    ],
)
def test_refusals_are_classified_by_status(
    http_receiver: HttpReceiver,
    mode: str,
    category: str,
    code: str,
    business: bool,
    ambiguous: bool,
) -> None:
    http_receiver.script(mode)

    error = submit_error(channel_for(http_receiver), make_action())

    assert (error.category, error.code, error.business) == (category, code, business)
    assert error.ambiguous is ambiguous
    assert error.status_code == int(mode.split(":")[1])
    assert "scripted" in error.snippet
    assert error.duration_ms >= 0


def test_429_carries_retry_after_in_seconds(http_receiver: HttpReceiver) -> None:
    http_receiver.script("429:7")

    error = submit_error(channel_for(http_receiver), make_action())

    assert (error.category, error.code, error.status_code) == (
        "quota",
        "RECEIVER_RATE_LIMITED",
        429,
    )
    assert error.retry_after_s == 7.0


def test_429_carries_retry_after_as_an_http_date(http_receiver: HttpReceiver) -> None:
    http_receiver.script(f"429:{http_date(30)}")

    error = submit_error(channel_for(http_receiver), make_action())

    assert error.category == "quota"
    assert error.retry_after_s is not None and 27 <= error.retry_after_s <= 31


def test_429_without_retry_after(http_receiver: HttpReceiver) -> None:
    http_receiver.script("429")

    assert submit_error(channel_for(http_receiver), make_action()).retry_after_s is None


def test_no_answer_in_time_is_an_ambiguous_timeout(http_receiver: HttpReceiver) -> None:
    http_receiver.script("hang")

    error = submit_error(channel_for(http_receiver, read_timeout_s=0.3), make_action())

    assert (error.category, error.code, error.ambiguous) == ("timeout", "RECEIVER_TIMEOUT", True)
    assert 250 <= error.duration_ms < 3000
    assert http_receiver.effects_total() == 1  # it did take effect: that is the ambiguity


def test_a_dropped_connection_is_lost_and_ambiguous(http_receiver: HttpReceiver) -> None:
    http_receiver.script("drop")

    error = submit_error(channel_for(http_receiver), make_action())

    assert (error.category, error.code) == ("transient", "RECEIVER_CONNECTION_LOST")
    assert error.ambiguous is True


def test_an_unreachable_receiver_is_transient_and_not_ambiguous(unreachable_port: int) -> None:
    channel = WebhookChannel(WebhookOptions(url=f"http://127.0.0.1:{unreachable_port}/hook"))

    error = submit_error(channel, make_action())

    assert (error.category, error.code) == ("transient", "RECEIVER_UNREACHABLE")
    assert error.ambiguous is False


def test_validate_bounds_the_json_body(http_receiver: HttpReceiver) -> None:
    channel = channel_for(http_receiver, max_body_bytes=100)
    channel.validate(make_action({"text": "x" * 80}))

    with pytest.raises(InvalidParams) as too_big:
        channel.validate(make_action({"text": "x" * 100}))
    with pytest.raises(InvalidParams) as not_json:
        channel.validate(make_action({"when": {1, 2}}))
    with pytest.raises(InvalidParams):
        channel.validate(make_action({"ratio": float("nan")}))
    error = submit_error(channel, make_action({"text": "x" * 100}))

    assert (too_big.value.field, too_big.value.rule) == ("", "at most 100 bytes of JSON")
    assert "JSON-serialisable" in not_json.value.rule
    assert (error.code, error.business) == ("INVALID_PARAMS", True)
    assert http_receiver.total() == 0


def test_a_deduplicating_receiver_replays_its_first_answer(
    deduping_receiver: HttpReceiver,
) -> None:
    deduping_receiver.script("fail_after_effect")
    channel = channel_for(deduping_receiver)
    action = make_action()

    async def use(c: WebhookChannel) -> Answer:
        with pytest.raises(ChannelError):
            await c.submit(action)
        return await c.submit(action)  # the executor's resend, same key

    answer = run(channel, use)

    assert answer.status is Status.SUCCESS and answer.external_id == "task-1"
    key = action.idempotency_key
    assert (deduping_receiver.deliveries(key), deduping_receiver.effects(key)) == (2, 1)
    assert deduping_receiver.deliveries_by("X-Reachstore-Action-Id") == {action.action_id: 2}


def test_the_receiver_can_be_scripted_over_http(http_receiver: HttpReceiver) -> None:
    remote_script(http_receiver.base_url, "status:503", default="accept")
    channel = channel_for(http_receiver)

    async def use(c: WebhookChannel) -> list[Answer]:
        answers: list[Answer] = []
        for _ in range(3):
            try:
                answers.append(await c.submit(make_action({"n": len(answers)})))
            except ChannelError:
                pass
        return answers

    answers = run(channel, use)
    stats = remote_stats(http_receiver.base_url)

    assert [a.status_code for a in answers] == [202, 202]
    assert stats["total"] == 3 and stats["effects_total"] == 2
    assert len(stats["rate_log"]) == 3 and stats["rate_log"] == sorted(stats["rate_log"])
    assert http_receiver.deliveries_by_field("n") == {"0": 2, "1": 1}


def test_retry_after_reads_seconds_and_dates() -> None:
    now = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_seconds("120", now=now) == 120.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:30:00 GMT", now=now) == 120.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:00:00 GMT", now=now) == 0.0
    assert retry_after_seconds("-3", now=now) == 0.0
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds(None) is None


def test_the_receiver_stops_at_once_even_with_a_hanging_request() -> None:
    receiver = HttpReceiver(default="hang").start()
    with socket.create_connection(("127.0.0.1", receiver.port), timeout=5) as client:
        client.sendall(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert receiver.wait_for(1)
        started = time.monotonic()
        receiver.stop()
        stopped_in = time.monotonic() - started
        assert client.recv(100) == b""  # closed without an answer

    assert stopped_in < 1.0
    assert receiver.effects_total() == 1


def test_a_misspelt_mode_is_refused_at_once(http_receiver: HttpReceiver) -> None:
    with pytest.raises(ValueError, match="unknown delivery mode 'stauts:500'"):
        http_receiver.script("stauts:500")
    with pytest.raises(ValueError, match="unknown status mode"):
        http_receiver.script_status("state")
