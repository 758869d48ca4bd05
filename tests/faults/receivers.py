"""The receivers under attack: real HTTP servers that log every request and its fate.

``FaultyReceiver`` extends the tests' ``HttpReceiver`` (its server, threads and shutdown)
with a fault drawn per request (``plan.FaultMix``) and a log detailed enough to judge the
sender by: for each POST, when it arrived and when the receiver was done with it, whether
it took a new effect (or replayed the effect of its key), what was answered, and whether
the whole answer went out while the client was still there. That last fact is what
"the receiver confirmed it" means: an effect AND a full 2xx answer the client could read.

Its status look-up (GET /tasks/{id}, by the id it answered or by Idempotency-Key) answers
from that log: ``done`` only for effects that took place, 404 for anything else, so a
look-up can settle an UNKNOWN action honestly or leave it to review.

``AlertReceiver`` takes every alert, a little slowly (so that two workers delivering the
same alert overlap), and logs each arrival by alert id.
"""

from __future__ import annotations

import dataclasses
import json
import random
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from tests.faults.config import Profile, Timing
from tests.faults.plan import EFFECT_FAULTS, FaultMix
from tests.reach.peers import HttpReceiver

# How long the receiver watches a connection after its answer for the client hanging up.
_HANG_UP_WINDOW_S = 0.05


@dataclasses.dataclass
class Request:
    """One POST as the receiver saw it. Times are ``time.monotonic()``."""

    channel: str
    action_id: str
    key: str | None
    intent: str
    fault: str
    start: float
    end: float = 0.0
    new_effect: bool = False
    replay: bool = False  # answered with the earlier effect of its key
    status: int = 0  # what was answered; 0: nothing (connection dropped)
    delivered: bool = False  # the whole answer went out and the client was still there
    effect_id: str = ""
    sender: str = ""  # the worker whose connection carried it ("": not found)

    @property
    def effective(self) -> bool:
        """The action has taken effect at the receiver by this request."""
        return self.new_effect or self.replay

    @property
    def confirmed(self) -> bool:
        return self.effective and 200 <= self.status < 300 and self.delivered

    def describe(self, t0: float) -> str:
        effect = "new effect" if self.new_effect else "replay" if self.replay else "no effect"
        answer = f"answered {self.status}" if self.status else "no answer"
        heard = "client read it" if self.delivered else "client did not read it"
        return (
            f"{self.start - t0:8.3f}..{self.end - t0:8.3f} s {self.sender or '?'} -> "
            f"{self.channel} POST "
            f"action={self.action_id} key={self.key} intent={self.intent} fault={self.fault}: "
            f"{effect}, {answer}, {heard}"
        )


@dataclasses.dataclass
class _Effect:
    key: str | None
    done_at: float  # monotonic time from which its status reads "done"


def _client_still_there(connection: socket.socket, wait_s: float = _HANG_UP_WINDOW_S) -> bool:
    """Watches the connection for up to ``wait_s``: False as soon as the client hangs up
    (EOF or reset). Used after an answer (one written into a closed connection reached
    no one) and instead of sleeping, so that a request counts as in flight only while its
    client still waits for it."""
    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        try:
            readable, _, _ = select.select([connection], [], [], max(left, 0))
            if readable and connection.recv(1, socket.MSG_PEEK) == b"":
                return False
        except OSError:
            return False
        if not readable or left <= 0:
            return True
        time.sleep(min(left, 0.05))  # data waiting (a next request): nothing to learn


def _nobody(client_port: int, server_port: int) -> str:
    return ""


class _Identified(HttpReceiver):
    """Names the sender of each connection once, with ``identify(client port, own port)``
    (the checker sets it to ``Cluster.sender_of``)."""

    identify: Callable[[int, int], str] = staticmethod(_nobody)

    def start(self) -> _Identified:
        super().start()
        # A provider does not refuse connections at 5 waiting (the server's default
        # backlog): a connection refused here would be a fault nobody drew.
        assert self._server is not None
        self._server.socket.listen(256)
        return self

    def sender(self, handler: Any) -> str:
        known = getattr(handler, "fault_sender", None)
        if known is None:
            known = handler.fault_sender = self.identify(handler.client_address[1], self.port)
        return str(known)


class FaultyReceiver(_Identified):
    def __init__(self, profile: Profile, mix: FaultMix, timing: Timing) -> None:
        super().__init__(dedupe=profile.dedupe)
        self.profile = profile
        self._mix = mix
        self._timing = timing
        self._requests: list[Request] = []
        self._seen: dict[str, int] = {}  # intent -> requests so far
        self._taken: dict[str, _Effect] = {}  # effect id -> effect
        self._effect_by_key: dict[str, str] = {}  # Idempotency-Key -> its first effect id
        self._intents_done: set[str] = set()  # intents that took effect here
        self.lookups = 0

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    # -- POST: a delivery

    def _deliver(self, handler: Any, body: bytes) -> None:
        key = handler.headers.get("Idempotency-Key")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        intent = str(parsed.get("intent", "")) if isinstance(parsed, dict) else ""
        sender = self.sender(handler)
        with self._lock:
            request = self._arrive(handler, key, intent)
            request.sender = sender
        try:
            self._answer(handler, request)
        except OSError:
            request.delivered = False
            handler.close_connection = True
        finally:
            request.end = time.monotonic()

    def _arrive(self, handler: Any, key: str | None, intent: str) -> Request:
        """Draws the request's fault and takes its effect; called under the lock."""
        n = self._seen.get(intent, 0)
        self._seen[intent] = n + 1
        known = self.profile.dedupe and key is not None and key in self._effect_by_key
        done_before = self.profile.idempotent and intent in self._intents_done
        fault = self._mix.draw(self.profile.name, intent, n, may_refuse=not (known or done_before))
        request = Request(
            channel=self.profile.name,
            action_id=handler.headers.get("X-Reachstore-Action-Id", ""),
            key=key,
            intent=intent,
            fault=fault,
            start=time.monotonic(),
        )
        self._requests.append(request)
        if fault not in EFFECT_FAULTS:
            return request
        if known:
            assert key is not None
            request.replay, request.effect_id = True, self._effect_by_key[key]
            return request
        effect_id = f"{self.profile.name}-fx{len(self._taken) + 1}"
        pending_s = 1.0 if fault == "accept" else 0.0
        self._taken[effect_id] = _Effect(key, request.start + pending_s)
        if key is not None:
            self._effect_by_key.setdefault(key, effect_id)
        self._intents_done.add(intent)
        request.new_effect, request.effect_id = True, effect_id
        return request

    def _answer(self, handler: Any, request: Request) -> None:
        fault, timing = request.fault, self._timing
        if fault == "drop":
            handler.close_connection = True
            return
        if fault == "5xx":
            self._send(handler, request, 503, {"error": "unavailable, try again"})
        elif fault == "429":
            self._send(handler, request, 429, {"error": "slow down"}, {"Retry-After": "1"})
        elif fault == "4xx":
            self._send(handler, request, 422, {"error": "refused on its merits"})
        elif fault == "accept":
            self._send(handler, request, 202, {"id": request.effect_id, "state": "accepted"})
        elif fault == "late":
            waited = _client_still_there(handler.connection, timing.late_s)
            if self._stopping.is_set() or not waited:
                handler.close_connection = True  # the client gave up before the answer
                return
            self._send(handler, request, 200, {"id": request.effect_id, "state": "done"})
        elif fault == "trickle":
            self._trickle(handler, request)
        else:
            self._send(handler, request, 200, {"id": request.effect_id, "state": "done"})

    def _send(
        self,
        handler: Any,
        request: Request,
        code: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.answer(code, body, headers)
        request.status = code
        request.delivered = _client_still_there(handler.connection)

    def _trickle(self, handler: Any, request: Request) -> None:
        """A 200 whose body comes a few bytes at a time over ``trickle_s``: every read gets
        something well within the read timeout, the whole answer takes past the lease."""
        timing = self._timing
        pieces = int(timing.trickle_s / timing.trickle_gap_s) + 1
        raw = json.dumps({"id": request.effect_id, "state": "done"}).encode()
        raw = raw.ljust(max(len(raw), pieces))  # trailing blanks are still valid JSON
        size = -(-len(raw) // pieces)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        request.status = 200
        for start in range(0, len(raw), size):
            if start and (
                self._stopping.is_set()
                or not _client_still_there(handler.connection, timing.trickle_gap_s)
            ):
                handler.close_connection = True  # the client gave up mid-answer
                return
            handler.wfile.write(raw[start : start + size])
        request.delivered = _client_still_there(handler.connection)

    # -- GET /tasks/{id}: the status look-up

    def _status(self, handler: Any, task_id: str) -> None:
        with self._lock:
            self.lookups += 1
            effect_id = task_id if task_id in self._taken else self._effect_by_key.get(task_id)
            effect = self._taken.get(effect_id) if effect_id else None
        if effect is None:
            handler.answer(404, {"error": "no such task"})
        else:
            state = "done" if time.monotonic() >= effect.done_at else "pending"
            handler.answer(200, {"id": effect_id, "state": state})


@dataclasses.dataclass
class AlertDelivery:
    alert_id: str
    body: Any
    start: float
    sender: str = ""
    end: float = 0.0
    answered: bool = False  # the 200 went out and the sender was still there

    def describe(self, t0: float) -> str:
        heard = "answered" if self.answered else "not answered"
        return (
            f"{self.start - t0:8.3f}..{self.end - t0:8.3f} s {self.sender or '?'} -> "
            f"alert {self.alert_id} ({heard}): {self.body}"
        )


class AlertReceiver(_Identified):
    """Takes every alert after ``latency`` seconds (drawn per alert from the seed)."""

    def __init__(self, seed: int, latency: tuple[float, float] = (0.2, 0.8)) -> None:
        super().__init__()
        self._seed = seed
        self._latency = latency
        self._alerts: list[AlertDelivery] = []

    @property
    def alerts(self) -> list[AlertDelivery]:
        with self._lock:
            return list(self._alerts)

    def _deliver(self, handler: Any, body: bytes) -> None:
        key = handler.headers.get("Idempotency-Key", "")
        action = handler.headers.get("X-Reachstore-Action-Id", "")
        alert_id = key.removeprefix("reachstore-alert-") if key else action.removeprefix("alert-")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        delivery = AlertDelivery(alert_id, parsed, time.monotonic(), self.sender(handler))
        with self._lock:
            self._alerts.append(delivery)
        self._stopping.wait(random.Random(f"{self._seed}/alert/{alert_id}").uniform(*self._latency))
        try:
            handler.answer(200, {"ok": True})
            delivery.answered = True
        except OSError:
            handler.close_connection = True
        finally:
            delivery.end = time.monotonic()
