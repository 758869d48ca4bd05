"""The webhook channel: one JSON POST per action to a receiver's URL.

Timeouts are split on purpose: a short connect timeout (a receiver that cannot be reached
in 3 s will not be reached in 30) and a longer read timeout (a receiver that is working
deserves some patience). Waiting 30 s on everything lets slow calls fill the pool.

What came back is classified so that the executor can decide without knowing HTTP:

- 2xx: accepted; PENDING when a status look-up is configured, else SUCCESS;
- 429: quota, with ``Retry-After`` read as seconds or as an HTTP-date;
- 408: transient; 5xx: transient and ambiguous (a receiver can fail after the action took
  effect, and a gateway's 502/504 says nothing of what lies behind it); 401/403: auth;
  405, 406, 411, 413, 414, 415, 426 and 431 (``SETUP_REFUSALS``): permanent and technical
  (the receiver cannot take a request of this method or form: our setup, for operations);
  any other 4xx: permanent and the business's concern (the receiver refused this action);
  3xx: permanent, technical and ambiguous (a 303 after a POST is how a receiver says
  "done, look there");
- no connection: transient and NOT ambiguous (nothing was sent);
- a read timeout or a connection lost after sending: ambiguous (it may have taken effect).

The whole send (connect, write and read together) is cut off after ``connect_timeout_s +
read_timeout_s`` by the executor (``send_deadline``). Sending ``Idempotency-Key`` (the
default) is not a promise that the receiver de-duplicates: only the channel's
``receiver_deduplicates = true`` lets the executor re-send after an ambiguous outcome.

With ``signing_secret_env`` set, every delivery is signed per Standard Webhooks
(``webhook_signing.py``). Status look-ups and cancels are not deliveries and carry only
the bearer token: signed under the delivery's ``webhook-id``, a cancel would be dropped by
a receiver that de-duplicates by it as a repeat of the delivery.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from reachstore_server.common import otel
from reachstore_server.reach.channels.base import (
    SNIPPET_CHARS,
    Answer,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.common import (
    Stopwatch,
    TableReader,
    json_default,
    traceparent,
)
from reachstore_server.reach.channels.http_dates import retry_after_seconds
from reachstore_server.reach.channels.webhook_signing import (
    SECRET_RULE,
    WebhookSigner,
    decode_secret,
)

# Refusals of the request's method or form (Method Not Allowed, Not Acceptable, Length
# Required, Content Too Large, URI Too Long, Unsupported Media Type, Upgrade Required,
# Request Header Fields Too Large): the integration is wrong, not the action.
SETUP_REFUSALS = frozenset({405, 406, 411, 413, 414, 415, 426, 431})
DONE_STATES = frozenset({"done", "succeeded", "success", "completed"})
FAILED_STATES = frozenset({"failed", "error", "rejected"})
PENDING_STATES = frozenset({"pending", "processing", "queued", "accepted", "running"})

# An answer is read up to this size: enough for any status object, and a receiver that
# streams megabytes back cannot fill our memory.
MAX_ANSWER_BYTES = 1 << 20
PLACEHOLDER = "{external_id}"

log = logging.getLogger(__name__)

# What a send the HTTP library refused before it left says, in place of the library's own
# message, which quotes the offending header value (a token, a signature).
_LOCAL_REFUSAL = (
    "the request is not valid HTTP and was not sent (a header value with a control or "
    "non-ASCII character; header values are not shown)"
)


@dataclasses.dataclass(frozen=True)
class WebhookOptions:
    """A webhook receiver's settings (one ``[channels.<name>]`` table of kind "webhook")."""

    url: str
    token: str | None = dataclasses.field(default=None, repr=False)
    idempotency_header: bool = True
    status_url: str | None = None
    cancel_url: str | None = None
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 8.0
    max_body_bytes: int = 65536
    signer: WebhookSigner | None = None

    @classmethod
    def from_table(
        cls, table: Mapping[str, Any], where: str, env: Mapping[str, str]
    ) -> WebhookOptions:
        reader = TableReader(table, where, env)
        url = reader.required_text("url")
        _check_http_url(reader, "url", url)
        status_url = reader.optional_text("status_url")
        cancel_url = reader.optional_text("cancel_url")
        for key, template in (("status_url", status_url), ("cancel_url", cancel_url)):
            if template is not None:
                if PLACEHOLDER not in template:
                    raise reader.error(key, f"must contain {PLACEHOLDER}")
                _check_http_url(reader, key, template.replace(PLACEHOLDER, "x"))
        token = reader.secret("token_env", header=True)
        if token is not None:
            urls = {"url": url, "status_url": status_url, "cancel_url": cancel_url}
            for key, value in urls.items():
                if value is not None and _in_clear_beyond_loopback(value.replace(PLACEHOLDER, "x")):
                    raise reader.error(
                        key,
                        "must be https:// with token_env set (the token would cross the "
                        "network in clear; http:// is accepted for loopback receivers only)",
                    )
        options = cls(
            url=url,
            token=token,
            idempotency_header=reader.boolean("idempotency_header", True),
            status_url=status_url,
            cancel_url=cancel_url,
            connect_timeout_s=reader.seconds("connect_timeout_s", 3.0),
            read_timeout_s=reader.seconds("read_timeout_s", 8.0),
            max_body_bytes=reader.integer("max_body_bytes", 65536, low=2, high=64 << 20),
            signer=_signer(reader, table, where),
        )
        reader.finish()
        return options


def _signer(reader: TableReader, table: Mapping[str, Any], where: str) -> WebhookSigner | None:
    """The signing keys named by ``signing_secret_env`` and, during a rotation,
    ``signing_secret_env_previous``; None (and a warning) when the channel signs nothing."""
    current = _signing_key(reader, table, "signing_secret_env")
    previous = _signing_key(reader, table, "signing_secret_env_previous")
    if current is None:
        if previous is not None:
            raise reader.error(
                "signing_secret_env_previous",
                "is set without signing_secret_env (the previous secret signs only next to "
                "the current one, during a rotation)",
            )
        log.warning(
            "%s: no signing_secret_env, so deliveries are sent unsigned and a receiver "
            "cannot tell them from forged ones",
            where,
        )
        return None
    if previous == current:
        raise reader.error(
            "signing_secret_env_previous",
            "holds the same secret as signing_secret_env (a rotation needs the new secret "
            "in signing_secret_env)",
        )
    return WebhookSigner(current, previous)


def _signing_key(reader: TableReader, table: Mapping[str, Any], key: str) -> bytes | None:
    secret = reader.secret(key)
    if secret is None:
        return None
    try:
        return decode_secret(secret)
    except ValueError as exc:  # the message says what is wrong, never the value
        raise reader.error(
            key, f"environment variable {table[key]} {SECRET_RULE}; its value {exc}"
        ) from None


def _in_clear_beyond_loopback(value: str) -> bool:
    url = httpx.URL(value)
    if url.scheme != "http":
        return False
    if url.host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(url.host).is_loopback
    except ValueError:
        return True


def _check_http_url(reader: TableReader, key: str, value: str) -> None:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise reader.error(key, f"is not a valid URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise reader.error(key, "must be an http:// or https:// URL with a host")


def encode_params(params: Mapping[str, Any]) -> bytes:
    """The request body: compact JSON, strict (no NaN), UTF-8."""
    return json.dumps(
        params, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=json_default
    ).encode()


class WebhookChannel:
    """Sends each action as one POST; one connection pool per channel."""

    def __init__(self, options: WebhookOptions) -> None:
        self.options = options
        self._client: httpx.AsyncClient | None = None

    @property
    def can_poll(self) -> bool:
        return self.options.status_url is not None

    @property
    def can_cancel(self) -> bool:
        return self.options.cancel_url is not None

    @property
    def sends_idempotency_key(self) -> bool:
        # A signed delivery carries the key as webhook-id, a receiver may de-duplicate by it.
        return self.options.idempotency_header or self.options.signer is not None

    def send_deadline(self) -> tuple[str, float]:
        # httpx bounds each connect and each read; a receiver that trickles its answer a
        # byte at a time would never hit a read timeout, so the whole send has this cap.
        o = self.options
        return "connect_timeout_s + read_timeout_s", o.connect_timeout_s + o.read_timeout_s

    def validate(self, action: Outgoing) -> None:
        self._body(action)

    def _body(self, action: Outgoing) -> bytes:
        try:
            body = encode_params(action.params)
        except (TypeError, ValueError) as exc:
            raise InvalidParams("", f"must be JSON-serialisable ({exc})") from None
        if len(body) > self.options.max_body_bytes:
            raise InvalidParams("", f"at most {self.options.max_body_bytes} bytes of JSON")
        return body

    async def start(self) -> None:
        """Makes the connection pool now (building its TLS context takes tens of ms), so
        that the first action's duration is the receiver's. Never raises."""
        try:
            self._http()
        except Exception as exc:  # best effort: the first submit tries again and reports
            log.warning(
                "webhook %s: could not prepare the connection pool: %s", self.options.url, exc
            )

    def _http(self) -> httpx.AsyncClient:
        # Created lazily so that it belongs to the event loop that uses it.
        if self._client is None:
            o = self.options
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=o.connect_timeout_s,
                    read=o.read_timeout_s,
                    write=o.read_timeout_s,
                    pool=o.connect_timeout_s,
                ),
                follow_redirects=False,  # a redirect is reported, never followed blindly
                trust_env=False,  # receivers are reached as configured, not via env proxies
                headers={"User-Agent": "reachstore-reach"},
            )
            otel.instrument_httpx(self._client)
        return self._client

    def _headers(self, action: Outgoing) -> dict[str, str]:
        headers = {
            "X-Reachstore-Action-Id": action.action_id,
            "X-Reachstore-Action-Type": action.action_type,
            "traceparent": traceparent(action.trace_id),
        }
        if self.options.token is not None:
            headers["Authorization"] = f"Bearer {self.options.token}"
        return headers

    async def submit(self, action: Outgoing) -> Answer:
        try:
            body = self._body(action)
        except InvalidParams as exc:
            raise ChannelError("permanent", "INVALID_PARAMS", str(exc), business=True) from None
        headers = self._headers(action)
        headers["Content-Type"] = "application/json"
        if self.options.idempotency_header:
            headers["Idempotency-Key"] = action.idempotency_key
        if self.options.signer is not None:
            # Signed here, just before sending: the timestamp is this attempt's.
            headers.update(
                self.options.signer.headers(action.idempotency_key, int(time.time()), body)
            )
        watch = Stopwatch()
        try:
            code, raw, response_headers = await self._send(
                "POST", self.options.url, headers=headers, content=body
            )
        except httpx.HTTPError as exc:
            raise _transport_error(exc, watch.ms()) from exc
        except UnicodeEncodeError as exc:  # a header value that is not ASCII: nothing sent
            raise ChannelError(
                "permanent", "RECEIVER_REQUEST_INVALID", f"could not send: {_LOCAL_REFUSAL}"
            ) from exc
        return _classify_submit(
            code,
            raw,
            response_headers,
            action.idempotency_key,
            pollable=self.can_poll,
            duration_ms=watch.ms(),
        )

    async def _send(
        self, method: str, url: str, *, headers: dict[str, str], content: bytes | None = None
    ) -> tuple[int, bytes, httpx.Headers]:
        request = self._http().build_request(method, url, headers=headers, content=content)
        response = await self._http().send(request, stream=True)
        try:
            raw = bytearray()
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) >= MAX_ANSWER_BYTES:
                    break
        finally:
            await response.aclose()
        return response.status_code, bytes(raw[:MAX_ANSWER_BYTES]), response.headers

    async def poll(self, action: Outgoing, external_id: str) -> Answer:
        template = self.options.status_url
        if template is None:
            return Answer(Status.UNKNOWN, external_id, detail="no status look-up configured")
        watch = Stopwatch()
        try:
            code, raw, _ = await self._send(
                "GET", _fill(template, external_id), headers=self._headers(action)
            )
        except Exception as exc:  # a look-up that cannot decide says UNKNOWN, never raises
            return Answer(
                Status.UNKNOWN,
                external_id,
                duration_ms=watch.ms(),
                detail=f"status look-up failed: {_describe(exc)}",
            )
        return _classify_poll(code, raw, external_id, watch.ms())

    async def cancel(self, action: Outgoing, external_id: str) -> bool:
        template = self.options.cancel_url
        if template is None:
            return False
        # No Idempotency-Key here: a provider that dedupes on it would answer the cancel
        # with the stored answer of the original submit.
        try:
            code, _, _ = await self._send(
                "POST", _fill(template, external_id), headers=self._headers(action)
            )
        except Exception as exc:  # cancel never raises: "could not cancel" is the answer
            log.warning("webhook cancel of %s failed: %s", external_id, type(exc).__name__)
            return False
        return 200 <= code < 300

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _fill(template: str, external_id: str) -> str:
    # Quoted so that an id cannot change the path ("../", "?", "#").
    return template.replace(PLACEHOLDER, quote(external_id, safe=""))


def _snippet(raw: bytes) -> str:
    return raw[: SNIPPET_CHARS * 4].decode("utf-8", errors="replace")[:SNIPPET_CHARS]


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _external_id(body: dict[str, Any] | None) -> str | None:
    for key in ("id", "task_id"):
        value = body.get(key) if body else None
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _state(body: dict[str, Any] | None) -> str | None:
    value = body.get("state") if body else None
    return value.strip().lower() if isinstance(value, str) else None


def _classify_submit(
    code: int,
    raw: bytes,
    headers: httpx.Headers,
    idempotency_key: str,
    *,
    pollable: bool,
    duration_ms: int,
) -> Answer:
    snippet = _snippet(raw)
    facts: dict[str, Any] = {"status_code": code, "snippet": snippet, "duration_ms": duration_ms}
    if 200 <= code < 300:
        body = _json_object(raw)
        done = not pollable or _state(body) in DONE_STATES
        return Answer(
            Status.SUCCESS if done else Status.PENDING,
            _external_id(body) or idempotency_key,
            **facts,
        )
    retry_after = retry_after_seconds(headers.get("Retry-After"))
    if code == 429:
        raise ChannelError(
            "quota",
            "RECEIVER_RATE_LIMITED",
            "the receiver is rate limiting (429)",
            retry_after_s=retry_after,
            **facts,
        )
    if code == 408 or code >= 500:
        raise ChannelError(
            "transient",
            "RECEIVER_UNAVAILABLE",
            f"the receiver answered {code}",
            retry_after_s=retry_after,
            ambiguous=code >= 500,
            **facts,
        )
    if code in (401, 403):
        raise ChannelError(
            "auth",
            "RECEIVER_AUTH_FAILED",
            f"the receiver refused our credentials ({code})",
            **facts,
        )
    if code in SETUP_REFUSALS:
        raise ChannelError(
            "permanent",
            "RECEIVER_REJECTED",
            f"the receiver cannot take a request of this method or form ({code}); check "
            "the channel's url and the receiver's version",
            **facts,
        )
    if 400 <= code < 500:
        raise ChannelError(
            "permanent",
            "RECEIVER_REJECTED",
            f"the receiver rejected the action ({code})",
            business=True,
            **facts,
        )
    raise ChannelError(
        "permanent",
        "RECEIVER_REDIRECTED",
        f"the receiver answered {code}; redirects are not followed, fix the url",
        ambiguous=True,
        **facts,
    )


def _transport_error(exc: httpx.HTTPError, duration_ms: int) -> ChannelError:
    """Classifies a request that got no HTTP answer, by how far it got."""
    text = _describe(exc)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        # The request never left: re-sending cannot duplicate anything.
        return ChannelError(
            "transient",
            "RECEIVER_UNREACHABLE",
            f"could not connect: {text}",
            duration_ms=duration_ms,
        )
    if isinstance(exc, httpx.TimeoutException):  # read or write timeout: it was (being) sent
        return ChannelError(
            "timeout",
            "RECEIVER_TIMEOUT",
            f"no answer in time: {text}",
            ambiguous=True,
            duration_ms=duration_ms,
        )
    if isinstance(exc, httpx.LocalProtocolError):
        # Its message quotes the header it refused, and headers carry the bearer token.
        return ChannelError(
            "permanent",
            "RECEIVER_REQUEST_INVALID",
            f"could not send: {_LOCAL_REFUSAL}",
            duration_ms=duration_ms,
        )
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ChannelError(
            "permanent",
            "RECEIVER_REQUEST_INVALID",
            f"could not send: {text}",
            duration_ms=duration_ms,
        )
    # RemoteProtocolError, ReadError, WriteError and the like: the connection went away
    # while or after the request was sent.
    return ChannelError(
        "transient",
        "RECEIVER_CONNECTION_LOST",
        f"connection lost: {text}",
        ambiguous=True,
        duration_ms=duration_ms,
    )


def _classify_poll(code: int, raw: bytes, external_id: str, duration_ms: int) -> Answer:
    facts: dict[str, Any] = {
        "external_id": external_id,
        "status_code": code,
        "snippet": _snippet(raw),
        "duration_ms": duration_ms,
    }
    if not 200 <= code < 300:
        return Answer(Status.UNKNOWN, detail=f"status look-up answered {code}", **facts)
    body = _json_object(raw)
    if body is None:
        return Answer(Status.UNKNOWN, detail="status look-up did not answer a JSON object", **facts)
    state = _state(body)
    if state in DONE_STATES:
        return Answer(Status.SUCCESS, **facts)
    if state in FAILED_STATES:
        return Answer(Status.FAILED, detail=f"the receiver reports state {state!r}", **facts)
    if state in PENDING_STATES:
        return Answer(Status.PENDING, **facts)
    return Answer(Status.UNKNOWN, detail=f"unrecognised state {body.get('state')!r}", **facts)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
