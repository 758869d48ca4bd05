"""Operations written once for the synchronous and the asynchronous client.

An operation is a generator that does no I/O itself: it yields the steps it needs - send
this request (``Send``) or wait this long (``Sleep``) - and receives each step's result
(the response message, or the SDK exception thrown into it). ``Client`` runs the steps
with blocking calls, ``AsyncClient`` with awaits; retries, polling loops and long polls
are written only here, and so behave the same in both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from google.protobuf.message import Message

from reachstore._errors import ReachstoreError
from reachstore._retry import RetryPolicy, retry_delay
from reachstore._rpc import Rpc

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Send:
    """Send ``request`` over ``rpc`` once, giving up after ``timeout`` seconds."""

    rpc: Rpc
    request: Message
    timeout: float


@dataclasses.dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Send | Sleep
# Yields steps, is sent each step's result, returns the operation's result.
Flow = Generator[Step, Any, _T]


def call(rpc: Rpc, request: Message, timeout: float, policy: RetryPolicy | None) -> Flow[Message]:
    """One RPC under the retry policy; returns the response message or raises the last
    error. ``timeout`` bounds each attempt and, unless the policy sets its own deadline,
    the whole call."""
    budget = policy.deadline if policy is not None and policy.deadline is not None else timeout
    deadline = time.monotonic() + budget
    attempt = 1
    while True:
        remaining = deadline - time.monotonic()
        try:
            response: Message = yield Send(rpc, request, max(0.001, min(timeout, remaining)))
            return response
        except ReachstoreError as error:
            remaining = deadline - time.monotonic()
            wait = retry_delay(policy, rpc, request, error, attempt, remaining)
            if wait is None:
                raise
        yield Sleep(wait)
        attempt += 1


def sleep(seconds: float) -> Flow[None]:
    """A pause inside an operation (zero or negative pauses are skipped)."""
    if seconds > 0:
        yield Sleep(seconds)


def run(flow: Flow[_T], send: Callable[[Send], Message]) -> _T:
    """Runs ``flow`` to its end with blocking steps: ``send`` for RPCs, ``time.sleep``."""
    value: Any = None
    error: ReachstoreError | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as done:
            result: _T = done.value
            return result
        value, error = None, None
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            continue
        try:
            value = send(step)
        except ReachstoreError as exc:
            error = exc


async def arun(flow: Flow[_T], send: Callable[[Send], Awaitable[Message]]) -> _T:
    """Runs ``flow`` to its end on the event loop: ``send`` for RPCs, ``asyncio.sleep``."""
    value: Any = None
    error: ReachstoreError | None = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(value)
        except StopIteration as done:
            result: _T = done.value
            return result
        value, error = None, None
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            continue
        try:
            value = await send(step)
        except ReachstoreError as exc:
            error = exc
