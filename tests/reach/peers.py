"""Real receivers for the reach layer's tests: HTTP, SMTP and gRPC over real sockets.

Each peer listens on 127.0.0.1 on a port the OS picked, runs in background threads,
records everything that arrives, and can be told how to answer. They are context
managers: ``with HttpReceiver() as receiver: ...`` starts and stops one.

- ``HttpReceiver``: a webhook receiver with a status endpoint (GET /tasks/{id}) and a cancel
  endpoint (POST /tasks/{id}/cancel); scriptable from Python and over HTTP (``/_control``),
  so a test can also script it from another process (see ``remote_script``).
- ``VerifyingReceiver``: an ``HttpReceiver`` that first checks each delivery's Standard
  Webhooks signature with the ``standardwebhooks`` package, as a user's receiver would.
- ``SmtpReceiver``: an aiosmtpd relay that records messages and can refuse RCPT or DATA,
  answer DATA late, or drop the connection after DATA; optionally STARTTLS and AUTH.
- ``GrpcReceiver``: a gRPC server for ``peer.v1.Tickets/Assign`` built at run time (no
  generated code), with server reflection, able to write its FileDescriptorSet, and
  scriptable to answer a status code or to be slow.

Helpers: ``closed_port`` (a port where nothing listens, for "unreachable"),
``self_signed_cert`` (a certificate for 127.0.0.1, made with the openssl command) and
``http_date`` (an HTTP-date some seconds from now).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import email.message
import email.policy
import email.utils
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import standardwebhooks
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    json_format,
    message_factory,
)
from google.rpc import error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status

LOCALHOST = "127.0.0.1"


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound but not listening: connecting is refused at once.

    Holding the socket for the duration keeps any other test from taking the port.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOCALHOST, 0))
        yield sock.getsockname()[1]
    finally:
        sock.close()


def self_signed_cert(directory: Path) -> tuple[Path, Path] | None:
    """A certificate and key for 127.0.0.1 and localhost, made with the ``openssl`` command
    (the ``cryptography`` package is not a dependency). None when openssl is missing."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key)]
        + ["-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


def http_date(seconds_from_now: float) -> str:
    """An HTTP-date (as in Retry-After) ``seconds_from_now`` seconds ahead."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# ---------------------------------------------------------------------- HTTP receiver

HTTP_MODES = """
ok                  200 {"id": <task>, "state": "done"}; the effect happens
echo                as ok, and the answer also carries the request body as "echo"
accept[:<late_s>]   202 {"id": <task>, "state": "accepted"}; the task reports "pending"
                    until late_s (default: the receiver's late_s) passed, then "done"
status:<code>       answers <code>: a 2xx code takes effect and has no body; any other
                    code has a JSON error body and takes no effect
429[:<value>]       429, with "Retry-After: <value>" when a value is given (seconds or
                    an HTTP-date; the value is sent verbatim)
hang[:<seconds>]    the effect happens but no answer comes for <seconds> (default 10),
                    then the connection is closed; stopping the receiver ends it at once
drop                reads the request and closes the connection: no effect, no answer
drop_after_effect   the effect happens, then the connection is closed without an answer
fail_after_effect   the effect happens, then 500
"""

STATUS_MODES = """
garbage             200 with a body that is not JSON
status:<code>       answers <code>
state:<word>        200 {"state": <word>}
"""

# Modes after which the receiver holds a result (an "effect") for the request.
_EFFECT_MODES = {"ok", "echo", "accept", "hang", "drop_after_effect", "fail_after_effect"}


def parse_mode(mode: str) -> tuple[str, str]:
    """Splits and checks a delivery mode (see ``HTTP_MODES``); ValueError if unknown."""
    name, _, arg = mode.partition(":")
    if name in ("ok", "echo", "drop", "drop_after_effect", "fail_after_effect") and not arg:
        return name, arg
    if name in ("accept", "hang") and (not arg or _is_number(arg)):
        return name, arg
    if name == "status" and arg.isdigit() and 200 <= int(arg) <= 599:
        return name, arg
    if name == "429":
        return name, arg
    raise ValueError(f"unknown delivery mode {mode!r}; known:{HTTP_MODES}")


def parse_status_mode(mode: str) -> tuple[str, str]:
    """Splits and checks a status-endpoint mode (see ``STATUS_MODES``)."""
    name, _, arg = mode.partition(":")
    if (
        (name == "garbage" and not arg)
        or (name == "status" and arg.isdigit())
        or (name == "state" and arg)
    ):
        return name, arg
    raise ValueError(f"unknown status mode {mode!r}; known:{STATUS_MODES}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One POST that arrived at a delivery path."""

    path: str
    headers: dict[str, str]  # names in lower case
    body: Any  # the parsed JSON, or None when the body was not JSON
    raw: bytes
    at: float  # time.monotonic() on arrival
    mode: str  # how it was answered
    new_effect: bool  # whether it took a new effect (False for a deduplicated repeat)
    task_id: str | None

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")


@dataclasses.dataclass
class _Task:
    state: str  # "pending", "done" or "cancelled"
    ready_at: float  # monotonic time after which a pending task reports done
    answer: tuple[int, dict[str, Any] | None]  # what a repeated Idempotency-Key gets back


class HttpReceiver:
    """A webhook receiver on 127.0.0.1:<free port> (see the module docstring).

    Every POST to a path other than ``/tasks/...`` and ``/_control/...`` is a delivery. How
    it is answered is the next one-shot mode queued with ``script`` or, when none is
    queued, the default mode (``set_default``); modes are listed in ``HTTP_MODES``.

    With ``dedupe=True`` it honours ``Idempotency-Key`` like a well-behaved provider: a key
    that already took effect gets the first answer again and takes no new effect.
    ``deliveries(key)`` counts arrivals, ``effects(key)`` distinct effects.

    Control over HTTP, for other processes (JSON bodies):
    POST /_control/script {"modes": [...]}, POST /_control/default {"mode": ...},
    POST /_control/status_script {"modes": [...]}, POST /_control/reset,
    GET /_control/stats -> {"total", "effects_total", "deliveries", "effects", "rate_log"}.
    """

    def __init__(self, *, dedupe: bool = False, late_s: float = 0.5, default: str = "ok"):
        parse_mode(default)
        self.dedupe = dedupe
        self.late_s = late_s
        self._default = default
        self._lock = threading.Condition()
        self._modes: collections.deque[str] = collections.deque()
        self._status_modes: collections.deque[str] = collections.deque()
        self._records: list[Delivery] = []
        self._effects: collections.Counter[str] = collections.Counter()
        self._tasks: dict[str, _Task] = {}
        self._by_key: dict[str, str] = {}  # Idempotency-Key -> task id of its effect
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []  # unexpected errors inside the receiver

    # -- life cycle

    def start(self) -> HttpReceiver:
        self._stopping.clear()
        handler = type("Handler", (_HttpHandler,), {"receiver": self})
        self._server = _Server((LOCALHOST, 0), handler)
        self._server.receiver = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving, ends hanging answers and closes every connection."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the connection threads
        assert self._thread is not None
        self._thread.join(5)
        self._server = None

    def __enter__(self) -> HttpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    @property
    def url(self) -> str:
        """The default delivery URL."""
        return f"{self.base_url}/hook"

    @property
    def status_url(self) -> str:
        return f"{self.base_url}/tasks/{{external_id}}"

    @property
    def cancel_url(self) -> str:
        return f"{self.base_url}/tasks/{{external_id}}/cancel"

    # -- scripting

    def script(self, *modes: str) -> None:
        """Queues one-shot modes, used by the next deliveries in order."""
        for mode in modes:
            parse_mode(mode)
        with self._lock:
            self._modes.extend(modes)

    def set_default(self, mode: str) -> None:
        """The mode used when no one-shot mode is queued."""
        parse_mode(mode)
        with self._lock:
            self._default = mode

    def script_status(self, *modes: str) -> None:
        """Queues one-shot answers of the status endpoint (see ``STATUS_MODES``)."""
        for mode in modes:
            parse_status_mode(mode)
        with self._lock:
            self._status_modes.extend(modes)

    def reset(self) -> None:
        """Forgets every delivery, effect and task, and every queued mode."""
        with self._lock:
            self._modes.clear()
            self._status_modes.clear()
            self._records.clear()
            self._effects.clear()
            self._tasks.clear()
            self._by_key.clear()
            self._default = "ok"

    def finish_task(self, task_id: str, state: str = "done") -> None:
        """Sets a task's state now (e.g. "failed"), whatever its late_s said."""
        with self._lock:
            self._tasks[task_id].state = state

    # -- what arrived

    @property
    def records(self) -> list[Delivery]:
        with self._lock:
            return list(self._records)

    def total(self) -> int:
        """Deliveries that arrived, repeats included."""
        with self._lock:
            return len(self._records)

    def effects_total(self) -> int:
        with self._lock:
            return sum(self._effects.values())

    def deliveries(self, key: str) -> int:
        """Arrivals carrying ``Idempotency-Key: key``."""
        with self._lock:
            return sum(1 for r in self._records if r.idempotency_key == key)

    def effects(self, key: str) -> int:
        """Distinct effects taken for ``Idempotency-Key: key`` (repeats a deduplicating
        receiver answered from memory are not counted)."""
        with self._lock:
            return self._effects[key]

    def deliveries_by(self, header: str) -> collections.Counter[str]:
        """Arrivals per value of a header, e.g. ``X-Reachstore-Action-Id``."""
        with self._lock:
            return collections.Counter(
                r.headers[header.lower()] for r in self._records if header.lower() in r.headers
            )

    def deliveries_by_field(self, field: str) -> collections.Counter[str]:
        """Arrivals per value of a top-level field of the JSON body."""
        with self._lock:
            return collections.Counter(
                str(r.body[field])
                for r in self._records
                if isinstance(r.body, dict) and field in r.body
            )

    @property
    def rate_log(self) -> list[float]:
        """Arrival times (time.monotonic()) of every delivery, in order."""
        with self._lock:
            return [r.at for r in self._records]

    def wait_for(self, count: int, timeout: float = 5.0) -> bool:
        """Waits until at least ``count`` deliveries arrived; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._records) >= count, timeout)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            keys = collections.Counter(
                r.idempotency_key for r in self._records if r.idempotency_key
            )
            return {
                "total": len(self._records),
                "effects_total": sum(self._effects.values()),
                "deliveries": dict(keys),
                "effects": dict(self._effects),
                "rate_log": [r.at for r in self._records],
            }

    # -- serving (called from connection threads)

    def _deliver(self, handler: _HttpHandler, body: bytes) -> None:
        key = handler.headers.get("Idempotency-Key")
        with self._lock:
            mode = self._modes.popleft() if self._modes else self._default
            name, arg = parse_mode(mode)
            takes_effect = name in _EFFECT_MODES or (name == "status" and arg.startswith("2"))
            replay = None
            if takes_effect and self.dedupe and key is not None and key in self._by_key:
                replay = self._tasks[self._by_key[key]].answer
                task_id: str | None = self._by_key[key]
            elif takes_effect:
                task_id = self._take_effect(name, arg, key, _json_or_none(body))
            else:
                task_id = None
            self._records.append(
                Delivery(
                    path=handler.path,
                    headers={k.lower(): v for k, v in handler.headers.items()},
                    body=_json_or_none(body),
                    raw=body,
                    at=time.monotonic(),
                    mode=f"replay:{mode}" if replay else mode,
                    new_effect=takes_effect and replay is None,
                    task_id=task_id,
                )
            )
            self._lock.notify_all()
        if replay is not None or name in ("ok", "echo", "accept", "status") and task_id is not None:
            assert task_id is not None
            handler.answer(*(replay or self._tasks[task_id].answer))
        elif name == "status":
            handler.answer(int(arg), {"error": f"scripted {arg}"})
        elif name == "429":
            handler.answer(429, {"error": "slow down"}, {"Retry-After": arg} if arg else {})
        elif name == "fail_after_effect":
            handler.answer(500, {"error": "failed after taking effect"})
        elif name == "hang":
            self._stopping.wait(float(arg) if arg else 10.0)
            handler.close_connection = True
        else:  # drop, drop_after_effect
            handler.close_connection = True

    def _take_effect(self, name: str, arg: str, key: str | None, request: Any = None) -> str:
        """Records a new effect (a task) and returns its id; called under the lock."""
        task_id = f"task-{len(self._tasks) + 1}"
        answer: tuple[int, dict[str, Any] | None] = (200, {"id": task_id, "state": "done"})
        if name == "echo":  # like ok, and the answer repeats the request body
            answer = (200, {"id": task_id, "state": "done", "echo": request})
        elif name == "accept":
            answer = (202, {"id": task_id, "state": "accepted"})
        elif name == "status":
            answer = (int(arg), None)  # a bare 2xx: no body, so no id either
        late = float(arg) if name == "accept" and arg else self.late_s
        self._tasks[task_id] = _Task(
            state="pending" if name == "accept" else "done",
            ready_at=time.monotonic() + late,
            answer=answer,
        )
        self._effects[key or ""] += 1
        if key is not None:
            self._by_key.setdefault(key, task_id)
        return task_id

    def _status(self, handler: _HttpHandler, task_id: str) -> None:
        with self._lock:
            mode = self._status_modes.popleft() if self._status_modes else None
            task = self._tasks.get(task_id)
            if task is not None and task.state == "pending" and time.monotonic() >= task.ready_at:
                task.state = "done"
            state = task.state if task is not None else None
        if mode is not None:
            name, arg = parse_status_mode(mode)
            if name == "garbage":
                handler.answer_raw(200, b"<html>not json", "text/html")
            elif name == "status":
                handler.answer(int(arg), {"error": f"scripted {arg}"})
            else:
                handler.answer(200, {"id": task_id, "state": arg})
        elif state is None:
            handler.answer(404, {"error": "no such task"})
        else:
            handler.answer(200, {"id": task_id, "state": state})

    def _cancel(self, handler: _HttpHandler, task_id: str) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None and task.state == "pending" and time.monotonic() >= task.ready_at:
                task.state = "done"
            if task is not None and task.state == "pending":
                task.state = "cancelled"
            state = task.state if task is not None else None
        if state is None:
            handler.answer(404, {"error": "no such task"})
        elif state == "cancelled":
            handler.answer(200, {"id": task_id, "state": "cancelled"})
        else:
            handler.answer(409, {"id": task_id, "state": state, "error": "too late to cancel"})

    def _control(self, handler: _HttpHandler, command: str, body: bytes) -> None:
        request = _json_or_none(body) or {}
        try:
            if command == "script":
                self.script(*request.get("modes", []))
            elif command == "default":
                self.set_default(request["mode"])
            elif command == "status_script":
                self.script_status(*request.get("modes", []))
            elif command == "reset":
                self.reset()
            elif command != "stats":
                handler.answer(404, {"error": f"unknown control {command!r}"})
                return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            handler.answer(400, {"error": str(exc)})
            return
        handler.answer(200, self.stats())


class VerifyingReceiver(HttpReceiver):
    """An ``HttpReceiver`` holding one Standard Webhooks secret: a delivery whose signature
    ``standardwebhooks.Webhook(secret).verify`` refuses is answered 401 and takes no effect
    (its reason is kept in ``refused``); one that verifies is served as usual."""

    def __init__(self, secret: str, **settings: Any) -> None:
        super().__init__(**settings)
        self.webhook = standardwebhooks.Webhook(secret)
        self.refused: list[str] = []

    def _deliver(self, handler: _HttpHandler, body: bytes) -> None:
        try:
            self.webhook.verify(body, dict(handler.headers.items()), json_parse=False)
        except standardwebhooks.WebhookVerificationError as exc:
            with self._lock:
                self.refused.append(str(exc))
            handler.answer(401, {"error": f"signature: {exc}"})
            return
        super()._deliver(handler, body)


class _Server(ThreadingHTTPServer):
    # Connection threads are joined on close (no daemon threads left behind): stop()
    # first shuts every connection down so that none of them can block the join.
    daemon_threads = False
    block_on_close = True
    receiver: HttpReceiver

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # the client went away: not the receiver's fault
            return
        if exc is not None:
            self.receiver.errors.append(exc)
        super().handle_error(request, client_address)


class _HttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers do
    timeout = 30  # an idle keep-alive connection is closed after this
    receiver: HttpReceiver

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.receiver._lock:
            if self.receiver._stopping.is_set():  # accepted just as stop() began
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
            self.receiver._connections.add(self.connection)

    def finish(self) -> None:
        with self.receiver._lock:
            self.receiver._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the records are the log."""

    def do_GET(self) -> None:
        self._body()
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts == ["_control", "stats"]:
            self.receiver._control(self, "stats", b"")
        elif len(parts) == 2 and parts[0] == "tasks":
            self.receiver._status(self, urllib.parse.unquote(parts[1]))
        else:
            self.answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self._body()
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 2 and parts[0] == "_control":
            self.receiver._control(self, parts[1], body)
        elif len(parts) == 3 and parts[0] == "tasks" and parts[2] == "cancel":
            self.receiver._cancel(self, urllib.parse.unquote(parts[1]))
        else:
            self.receiver._deliver(self, body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def answer(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Answers JSON, or no body at all when ``body`` is None."""
        raw = b"" if body is None else json.dumps(body).encode()
        self.answer_raw(code, raw, "application/json", headers)

    def answer_raw(
        self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def remote_script(base_url: str, *modes: str, default: str | None = None) -> dict[str, Any]:
    """Scripts an HttpReceiver that runs in another process; returns its stats."""
    if default is not None:
        _remote(base_url, "default", {"mode": default})
    return _remote(base_url, "script", {"modes": list(modes)})


def remote_stats(base_url: str) -> dict[str, Any]:
    """The stats of an HttpReceiver that runs in another process."""
    with urllib.request.urlopen(f"{base_url}/_control/stats", timeout=5) as answer:
        result: dict[str, Any] = json.load(answer)
    return result


def _remote(base_url: str, command: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{base_url}/_control/{command}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        result: dict[str, Any] = json.load(answer)
    return result


# ---------------------------------------------------------------------- SMTP receiver


@dataclasses.dataclass(frozen=True)
class ReceivedMail:
    """One message the relay accepted."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: email.message.EmailMessage
    raw: bytes
    at: float

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])

    @property
    def text(self) -> str:
        body = self.message.get_body(("plain",))
        assert body is not None
        return str(body.get_content())


class SmtpReceiver:
    """An SMTP relay on 127.0.0.1:<free port> (aiosmtpd) that records accepted messages.

    Switches (they stay until ``clear``): ``refuse_rcpt`` answers a code to RCPT (for one
    address or all), ``refuse_data`` answers a code at the end of DATA, ``delay_data``
    accepts the message but answers only after a delay, ``drop_data`` accepts it and closes
    the connection without answering. The last two take effect: the message is recorded.

    ``tls=(cert, key)`` offers STARTTLS; ``login=(user, password)`` offers AUTH (allowed
    without TLS, for tests). An instance is started once (its port is bound at creation).
    """

    def __init__(
        self,
        *,
        tls: tuple[Path, Path] | None = None,
        login: tuple[str, str] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._messages: list[ReceivedMail] = []
        self._rcpt: dict[str | None, str] = {}  # address (None: every address) -> reply
        self._data_reply: str | None = None
        self._data_delay = 0.0
        self._drop_data = False
        self.auth_attempts: list[tuple[str, bool]] = []
        kwargs: dict[str, Any] = {"server_hostname": "peer.test", "ready_timeout": 5.0}
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            kwargs.update(tls_context=context, require_starttls=False)
        if login is not None:
            self._login = login
            kwargs.update(authenticator=self._authenticate, auth_require_tls=False)
        self._controller = _BoundController(_SmtpHandler(self), **kwargs)
        self._started = False

    def start(self) -> SmtpReceiver:
        self._controller.start()
        self._started = True
        return self

    def stop(self) -> None:
        if self._started:
            self._controller.stop()
            self._controller.close_socket()
            self._started = False

    def __enter__(self) -> SmtpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        return LOCALHOST

    @property
    def port(self) -> int:
        return self._controller.port

    @property
    def messages(self) -> list[ReceivedMail]:
        with self._lock:
            return list(self._messages)

    def refuse_rcpt(
        self, code: int = 550, text: str = "5.1.1 No such user", address: str | None = None
    ) -> None:
        """Answers ``code`` to RCPT TO for ``address`` (every address when None)."""
        with self._lock:
            self._rcpt[address] = f"{code} {text}"

    def refuse_data(self, code: int = 554, text: str = "5.6.0 Message refused") -> None:
        with self._lock:
            self._data_reply = f"{code} {text}"

    def delay_data(self, seconds: float) -> None:
        """Accepts (records) the message but sends the final reply after ``seconds``."""
        with self._lock:
            self._data_delay = seconds

    def drop_data(self) -> None:
        """Accepts (records) the message, then closes the connection without a reply."""
        with self._lock:
            self._drop_data = True

    def clear(self) -> None:
        """Back to accepting everything at once (recorded messages are kept)."""
        with self._lock:
            self._rcpt.clear()
            self._data_reply = None
            self._data_delay = 0.0
            self._drop_data = False

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and (data.login.decode(), data.password.decode()) == self._login
        )
        with self._lock:
            self.auth_attempts.append((mechanism, ok))
        return AuthResult(success=ok, handled=False)


class _SmtpHandler:
    """aiosmtpd hooks, delegating the decisions to the receiver's switches."""

    def __init__(self, receiver: SmtpReceiver) -> None:
        self.receiver = receiver

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        r = self.receiver
        with r._lock:
            reply = r._rcpt.get(address) or r._rcpt.get(None)
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        r = self.receiver
        with r._lock:
            reply, delay, drop = r._data_reply, r._data_delay, r._drop_data
        if reply is not None:
            return reply
        raw = envelope.original_content or b""
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, email.message.EmailMessage)
        mail = ReceivedMail(
            mail_from=str(envelope.mail_from),
            rcpt_tos=tuple(envelope.rcpt_tos),
            message=parsed,
            raw=raw,
            at=time.monotonic(),
        )
        with r._lock:
            r._messages.append(mail)
        if drop:
            assert isinstance(server.transport, asyncio.Transport)
            server.transport.abort()
            return "250 OK (never sent: the connection is closed)"
        if delay:
            await asyncio.sleep(delay)
        return "250 OK queued as " + mail.message_id.strip("<>")


class _BoundController(Controller):
    """A Controller on a port the OS picked: the socket is bound before the server starts,
    so no other process can take the port in between."""

    def __init__(self, handler: Any, **kwargs: Any) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((LOCALHOST, 0))
        super().__init__(handler, hostname=LOCALHOST, port=self._sock.getsockname()[1], **kwargs)

    def _create_server(self) -> Any:
        return self.loop.create_server(self._factory_invoker, sock=self._sock)

    def close_socket(self) -> None:
        self._sock.close()


# ---------------------------------------------------------------------- gRPC receiver

TICKETS_FILE = "peer/v1/tickets.proto"
TICKETS_SERVICE = "peer.v1.Tickets"
ASSIGN_METHOD = "/peer.v1.Tickets/Assign"


def tickets_file() -> descriptor_pb2.FileDescriptorProto:
    """``peer/v1/tickets.proto``, built in code:

    service Tickets { rpc Assign(AssignRequest) returns (AssignReply); }
    message AssignRequest { string ticket = 1; string group = 2; int32 count = 3; }
    message AssignReply { string id = 1; bool accepted = 2; }
    """
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name=TICKETS_FILE, package="peer.v1", syntax="proto3"
    )
    request = proto.message_type.add(name="AssignRequest")
    request.field.add(name="ticket", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    request.field.add(name="group", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    request.field.add(name="count", number=3, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    reply = proto.message_type.add(name="AssignReply")
    reply.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    reply.field.add(name="accepted", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    service = proto.service.add(name="Tickets")
    service.method.add(
        name="Assign", input_type=".peer.v1.AssignRequest", output_type=".peer.v1.AssignReply"
    )
    return proto


@dataclasses.dataclass(frozen=True)
class GrpcCall:
    """One call that reached ``Assign``."""

    request: dict[str, Any]  # every field, defaults included, with proto field names
    metadata: dict[str, str]
    at: float


class GrpcReceiver:
    """A gRPC server on 127.0.0.1:<free port> serving ``peer.v1.Tickets/Assign``.

    It answers ``{"id": "a-<n>", "accepted": true}`` unless told otherwise by the next
    one-shot behaviour (``script``) or the default one (``set_default``):
    "ok", "status:<CODE>[:details]" (e.g. "status:INVALID_ARGUMENT:no such group"),
    "exhausted:<retry_s>" (RESOURCE_EXHAUSTED with a google.rpc.RetryInfo detail) and
    "sleep:<seconds>" (answers ok after that long; stopping the server ends the wait).
    The call is recorded whatever the answer.

    ``reflection=False`` serves no reflection (for the descriptor-set mode); ``tls``
    (certificate chain and key, PEM) serves TLS only;
    ``write_descriptor_set`` writes the FileDescriptorSet a client needs then.
    """

    def __init__(self, *, reflection: bool = True, tls: tuple[bytes, bytes] | None = None) -> None:
        self._tls = tls  # (certificate chain, private key), PEM: serve TLS only
        self._pool = descriptor_pool.DescriptorPool()
        self._pool.Add(tickets_file())
        self.request_class = message_factory.GetMessageClass(
            self._pool.FindMessageTypeByName("peer.v1.AssignRequest")
        )
        self.reply_class = message_factory.GetMessageClass(
            self._pool.FindMessageTypeByName("peer.v1.AssignReply")
        )
        self._reflection = reflection
        self._lock = threading.Lock()
        self._calls: list[GrpcCall] = []
        self._script: collections.deque[str] = collections.deque()
        self._default = "ok"
        self._stopping = threading.Event()
        self._server: grpc.Server | None = None
        self._port = 0

    def start(self) -> GrpcReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handler = grpc.unary_unary_rpc_method_handler(
            self._assign,
            request_deserializer=self.request_class.FromString,
            response_serializer=self.reply_class.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(TICKETS_SERVICE, {"Assign": handler}),)
        )
        if self._reflection:
            reflection.enable_server_reflection(
                (TICKETS_SERVICE, reflection.SERVICE_NAME), server, pool=self._pool
            )
        if self._tls is None:
            self._port = server.add_insecure_port(f"{LOCALHOST}:0")
        else:
            cert, key = self._tls
            credentials = grpc.ssl_server_credentials([(key, cert)])
            self._port = server.add_secure_port(f"{LOCALHOST}:0", credentials)
        server.start()
        self._server = server
        self._stopping.clear()
        return self

    def stop(self) -> None:
        """Stops at once: calls in progress are cancelled, sleeping ones woken."""
        if self._server is not None:
            self._stopping.set()
            self._server.stop(grace=None).wait(5)
            self._server = None

    def __enter__(self) -> GrpcReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def target(self) -> str:
        return f"{LOCALHOST}:{self._port}"

    @property
    def calls(self) -> list[GrpcCall]:
        with self._lock:
            return list(self._calls)

    def script(self, *behaviours: str) -> None:
        for behaviour in behaviours:
            _parse_behaviour(behaviour)
        with self._lock:
            self._script.extend(behaviours)

    def set_default(self, behaviour: str) -> None:
        _parse_behaviour(behaviour)
        with self._lock:
            self._default = behaviour

    def write_descriptor_set(self, path: Path) -> Path:
        """Writes the FileDescriptorSet of tickets.proto to ``path`` and returns it."""
        path.write_bytes(
            descriptor_pb2.FileDescriptorSet(file=[tickets_file()]).SerializeToString()
        )
        return path

    def _assign(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = GrpcCall(
            request=json_format.MessageToDict(
                request, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
            ),
            metadata={m.key: m.value for m in context.invocation_metadata()},
            at=time.monotonic(),
        )
        with self._lock:
            self._calls.append(call)
            number = len(self._calls)
            behaviour = self._script.popleft() if self._script else self._default
        name, code, arg = _parse_behaviour(behaviour)
        if name == "status":
            context.abort(code, arg or f"scripted {code.name}")
        if name == "exhausted":
            delay = duration_pb2.Duration()
            delay.FromTimedelta(datetime.timedelta(seconds=float(arg)))
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            context.abort_with_status(
                rpc_status.to_status(
                    status_pb2.Status(
                        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                        message="quota exceeded",
                        details=[detail],
                    )
                )
            )
        if name == "sleep":
            self._stopping.wait(float(arg))
        return self.reply_class(id=f"a-{number}", accepted=True)


def _parse_behaviour(behaviour: str) -> tuple[str, grpc.StatusCode, str]:
    name, _, rest = behaviour.partition(":")
    if name == "ok" and not rest:
        return name, grpc.StatusCode.OK, ""
    if name == "status":
        code_name, _, details = rest.partition(":")
        code = getattr(grpc.StatusCode, code_name, None)
        if isinstance(code, grpc.StatusCode) and code != grpc.StatusCode.OK:
            return name, code, details
    if name in ("exhausted", "sleep") and _is_number(rest):
        return name, grpc.StatusCode.OK, rest
    raise ValueError(
        f"unknown behaviour {behaviour!r}; known: ok, status:<CODE>[:details], "
        "exhausted:<retry_s>, sleep:<seconds>"
    )
