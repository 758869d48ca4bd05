"""The e-mail channel: one message per action through an SMTP relay.

The stdlib client is blocking, so each send runs in a worker thread. SMTP cannot dedupe
on our idempotency key, but the Message-ID is derived from it: the same action always
carries the same Message-ID, which lets a receiving system drop a second copy.

The transaction is all or nothing: if any recipient is refused, the message is sent to
no one (RSET), so a retry can never double-deliver to the recipients that were accepted.
Whether a failure is ambiguous depends on how far the transaction got: until the message
text is sent after DATA, the relay has nothing it could deliver.

Every socket step is bounded by ``timeout_s`` and the whole session by ``send_timeout_s``
(the executor stops waiting there, and the outcome is ambiguous); a cancelled submit cannot
stop its worker thread, which ends on its own at the latest one timeout later.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import email.policy
import email.utils
import hashlib
import re
import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from reachstore_server.reach.channels.base import (
    SNIPPET_CHARS,
    Answer,
    ChannelError,
    InvalidParams,
    Outgoing,
    Status,
)
from reachstore_server.reach.channels.common import Stopwatch, TableReader

MAX_RECIPIENTS = 50
# SMTP sessions one e-mail channel runs at once (each in a thread of its own).
SMTP_THREADS = 16
MAX_SUBJECT_CHARS = 998  # RFC 5322's limit for one header line
MAX_BODY_BYTES = 256 * 1024

# Plain ASCII addresses only: no display names, comments or quoted local parts, which are
# where header and envelope injection hide.
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*")
_PARAMS = ("to", "subject", "body")


def is_address(value: str) -> bool:
    return len(value) <= 254 and _ADDRESS.fullmatch(value) is not None


def message_id(idempotency_key: str, domain: str) -> str:
    """The Message-ID an action's message carries: the same key gives the same id."""
    return f"<{hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]}@{domain}>"


@dataclasses.dataclass(frozen=True)
class EmailOptions:
    """An SMTP relay's settings (one ``[channels.<name>]`` table of kind "email").

    ``tls_ca_file`` (optional) is a PEM file of the certificate authorities trusted for
    STARTTLS, for relays with a private CA; without it the system's CAs are used.
    """

    host: str
    sender: str
    port: int = 25
    starttls: bool = False
    username: str | None = dataclasses.field(default=None, repr=False)
    password: str | None = dataclasses.field(default=None, repr=False)
    timeout_s: float = 8.0
    # The whole SMTP session, every exchange together (each is also bounded by timeout_s).
    send_timeout_s: float = 20.0
    message_id_domain: str = "reachstore.local"
    tls_ca_file: str | None = None

    @classmethod
    def from_table(
        cls, table: Mapping[str, Any], where: str, env: Mapping[str, str]
    ) -> EmailOptions:
        reader = TableReader(table, where, env)
        host = reader.required_text("host")
        sender = reader.required_text("sender")
        if not is_address(sender):
            raise reader.error("sender", "must be a plain e-mail address (name@domain)")
        username = reader.secret("username_env")
        password = reader.secret("password_env")
        if (username is None) != (password is None):
            raise reader.error(
                "username_env" if username is None else "password_env",
                "username_env and password_env go together: give both or neither",
            )
        domain = reader.text("message_id_domain", "reachstore.local")
        if not _DOMAIN.fullmatch(domain):
            raise reader.error("message_id_domain", "must be a domain name (letters, digits, -, .)")
        ca_file = reader.optional_text("tls_ca_file")
        if ca_file is not None and not Path(ca_file).is_file():
            raise reader.error("tls_ca_file", f"no such file: {ca_file}")
        timeout_s = reader.seconds("timeout_s", 8.0)
        send_timeout_s = reader.seconds("send_timeout_s", max(20.0, timeout_s))
        if send_timeout_s < timeout_s:
            raise reader.error("send_timeout_s", "must be at least timeout_s")
        # With credentials, STARTTLS unless told otherwise, and never without it: the
        # password would cross the network in clear (docs/SECURITY.md).
        starttls = reader.boolean("starttls", username is not None)
        if username is not None and not starttls:
            raise reader.error(
                "starttls",
                "must be true with username_env and password_env: the password would cross "
                "the network in clear",
            )
        options = cls(
            host=host,
            sender=sender,
            port=reader.integer("port", 25, low=1, high=65535),
            starttls=starttls,
            username=username,
            password=password,
            timeout_s=timeout_s,
            send_timeout_s=send_timeout_s,
            message_id_domain=domain,
            tls_ca_file=ca_file,
        )
        reader.finish()
        return options


def recipients(params: Mapping[str, Any]) -> list[str]:
    """Checks ``params`` (to, subject, body) and returns the recipients as a list."""
    if not isinstance(params, Mapping):
        raise InvalidParams("", "must be an object with to, subject and body")
    for key in params:
        if key not in _PARAMS:
            raise InvalidParams(str(key), "unknown field (expected to, subject, body)")
    to = params.get("to")
    if isinstance(to, str):
        to = [to]
    if not isinstance(to, list | tuple) or not 1 <= len(to) <= MAX_RECIPIENTS:
        raise InvalidParams("to", f"an address or a list of 1 to {MAX_RECIPIENTS} addresses")
    for index, address in enumerate(to):
        if not isinstance(address, str) or not is_address(address):
            field = "to" if isinstance(params.get("to"), str) else f"to.{index}"
            raise InvalidParams(field, "a plain e-mail address (name@domain)")
    subject = params.get("subject")
    if not isinstance(subject, str) or not 1 <= len(subject) <= MAX_SUBJECT_CHARS:
        raise InvalidParams("subject", f"a string of 1 to {MAX_SUBJECT_CHARS} characters")
    if any(c in subject for c in "\r\n\0"):
        raise InvalidParams("subject", "one line: no CR, LF or NUL (header injection)")
    _utf8("subject", subject)
    body = params.get("body")
    if not isinstance(body, str):
        raise InvalidParams("body", "a text")
    if len(_utf8("body", body)) > MAX_BODY_BYTES:
        raise InvalidParams("body", f"at most {MAX_BODY_BYTES // 1024} KiB of text")
    return list(to)


def _utf8(field: str, text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParams(field, "valid Unicode text (no lone surrogates)") from None


class EmailChannel:
    """Sends each action as one e-mail through the configured relay."""

    def __init__(self, options: EmailOptions) -> None:
        self.options = options
        # SMTP sessions run in threads of the channel's own: a relay that holds every
        # session open (a tarpit) then fills only these, and the process's default threads,
        # which the store's transactions run in, stay free. A session cut off at its
        # deadline keeps its thread until its socket times out.
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=SMTP_THREADS, thread_name_prefix="smtp"
        )

    @property
    def can_poll(self) -> bool:
        return False

    @property
    def can_cancel(self) -> bool:
        return False

    @property
    def sends_idempotency_key(self) -> bool:
        return True  # in the Message-ID; relays do not de-duplicate by it

    def send_deadline(self) -> tuple[str, float]:
        return "send_timeout_s", self.options.send_timeout_s

    def validate(self, action: Outgoing) -> None:
        recipients(action.params)

    async def start(self) -> None:
        """Nothing to warm up: each message opens its own SMTP session."""

    def build_message(self, action: Outgoing) -> EmailMessage:
        to = recipients(action.params)
        # 7-bit transfer encoding: a non-ASCII body goes as quoted-printable or base64,
        # which every relay carries, 8BITMIME or not.
        message = EmailMessage(policy=email.policy.default.clone(cte_type="7bit"))
        message["From"] = self.options.sender
        message["To"] = ", ".join(to)
        message["Subject"] = action.params["subject"]
        message["Date"] = email.utils.formatdate(usegmt=True)
        message["Message-ID"] = message_id(action.idempotency_key, self.options.message_id_domain)
        message["X-Reachstore-Action-Id"] = action.action_id
        message.set_content(action.params["body"])
        return message

    async def submit(self, action: Outgoing) -> Answer:
        try:
            message = self.build_message(action)
        except (InvalidParams, ValueError) as exc:
            raise ChannelError("permanent", "INVALID_PARAMS", str(exc), business=True) from None
        watch = Stopwatch()
        try:
            code, reply = await asyncio.get_running_loop().run_in_executor(
                self._threads, self._send, message, recipients(action.params)
            )
        except ChannelError as exc:
            exc.duration_ms = watch.ms()
            raise
        return Answer(
            Status.SUCCESS,
            external_id=message["Message-ID"],
            status_code=code,
            snippet=reply[:SNIPPET_CHARS],
            duration_ms=watch.ms(),
        )

    def _send(self, message: EmailMessage, to: list[str]) -> tuple[int, str]:
        """One SMTP session, in a worker thread. Returns the final reply or raises."""
        o = self.options
        phase = "connect"
        smtp: smtplib.SMTP | None = None
        try:
            # Connects, and raises SMTPConnectError unless greeted with 220. The EHLO name
            # is our Message-ID domain: looking up our own FQDN can take seconds.
            smtp = smtplib.SMTP(
                o.host, o.port, timeout=o.timeout_s, local_hostname=o.message_id_domain
            )
            phase = "session"
            smtp.ehlo_or_helo_if_needed()
            if o.starttls:
                _starttls(smtp, o.tls_ca_file)
            if o.username is not None and o.password is not None:
                _login(smtp, o.username, o.password)
            code, text = _reply(smtp.mail(o.sender))
            _expect(code, text, 250, "MAIL FROM")
            refused = [(a, *_reply(smtp.rcpt(a))) for a in to]
            refused = [(a, c, t) for a, c, t in refused if c not in (250, 251)]
            if refused:
                _quietly(smtp.rset)
                raise _refused(refused)
            phase = "data"  # from here the relay may hold the message: failures are ambiguous
            code, text = _reply(smtp.data(message.as_bytes(policy=email.policy.SMTP)))
            _expect(code, text, 250, "message")
            _quietly(smtp.quit)
            return code, text
        except smtplib.SMTPDataError as exc:  # DATA itself refused: nothing was sent
            raise _by_code(exc.smtp_code, _text(exc.smtp_error), "DATA") from None
        except smtplib.SMTPResponseException as exc:  # e.g. EHLO refused
            raise _by_code(exc.smtp_code, _text(exc.smtp_error), "session") from None
        except (TimeoutError, smtplib.SMTPServerDisconnected, OSError) as exc:
            raise _connection_failure(phase, exc) from None
        finally:
            if smtp is not None:
                smtp.close()

    async def poll(self, action: Outgoing, external_id: str) -> Answer:
        return Answer(Status.UNKNOWN, external_id, detail="SMTP has no status look-up")

    async def cancel(self, action: Outgoing, external_id: str) -> bool:
        return False

    async def close(self) -> None:
        """Nothing held open between messages; sessions still running end on their own."""
        self._threads.shutdown(wait=False, cancel_futures=True)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def _reply(reply: tuple[int, bytes]) -> tuple[int, str]:
    return reply[0], _text(reply[1])


def _quietly(step: Any) -> None:
    try:
        step()
    except (smtplib.SMTPException, OSError):
        pass


def _expect(code: int, text: str, wanted: int, step: str) -> None:
    if code != wanted:
        raise _by_code(code, text, step)


def _by_code(code: int, text: str, step: str) -> ChannelError:
    """A refusal the relay stated: 4xx is temporary, 5xx is final. Never ambiguous."""
    facts: dict[str, Any] = {"status_code": code, "snippet": text[:SNIPPET_CHARS]}
    if 400 <= code < 500:
        return ChannelError(
            "transient", "SMTP_TEMPORARY_FAILURE", f"{step}: relay answered {code}", **facts
        )
    return ChannelError("permanent", "SMTP_REJECTED", f"{step}: relay answered {code}", **facts)


def _refused(refused: list[tuple[str, int, str]]) -> ChannelError:
    lines = "; ".join(f"{address}: {code} {text}" for address, code, text in refused)
    final = [r for r in refused if r[1] >= 500]
    address, code, text = final[0] if final else refused[0]
    facts: dict[str, Any] = {"status_code": code, "snippet": lines[:SNIPPET_CHARS]}
    if final:
        # The address itself is refused: the action, not our setup, needs fixing.
        return ChannelError(
            "permanent",
            "RECIPIENT_REFUSED",
            f"recipient {address} refused ({code}); nothing was sent",
            business=True,
            **facts,
        )
    return ChannelError(
        "transient",
        "SMTP_TEMPORARY_FAILURE",
        f"recipient {address} deferred ({code}); nothing was sent",
        **facts,
    )


def _starttls(smtp: smtplib.SMTP, ca_file: str | None) -> None:
    if not smtp.has_extn("starttls"):
        # Never fall back to plain text when TLS was asked for.
        raise ChannelError(
            "permanent",
            "SMTP_STARTTLS_UNSUPPORTED",
            "starttls is configured but the relay does not offer STARTTLS",
        )
    try:
        smtp.starttls(context=ssl.create_default_context(cafile=ca_file))
    except ssl.SSLError as exc:  # certificate refused, no common protocol, ...
        raise ChannelError(
            "permanent", "SMTP_TLS_FAILED", f"TLS with the relay failed: {exc}"
        ) from None
    smtp.ehlo()


def _login(smtp: smtplib.SMTP, username: str, password: str) -> None:
    try:
        smtp.login(username, password)
    except smtplib.SMTPAuthenticationError as exc:
        raise ChannelError(
            "auth",
            "SMTP_AUTH_FAILED",
            f"the relay refused our credentials ({exc.smtp_code})",
            status_code=exc.smtp_code,
            snippet=_text(exc.smtp_error)[:SNIPPET_CHARS],
        ) from None
    except (smtplib.SMTPServerDisconnected, smtplib.SMTPResponseException):
        raise  # a lost connection or a refused EHLO, classified by the caller
    except smtplib.SMTPException as exc:  # AUTH not offered, or no method in common
        raise ChannelError("auth", "SMTP_AUTH_FAILED", f"cannot log in: {exc}") from None


def _connection_failure(phase: str, exc: BaseException) -> ChannelError:
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if phase == "connect":
        return ChannelError("transient", "SMTP_UNREACHABLE", f"could not reach the relay: {what}")
    ambiguous = phase == "data"
    # smtplib reports a read that timed out as a disconnect caused by the timeout.
    if isinstance(exc, TimeoutError) or isinstance(exc.__context__, TimeoutError):
        return ChannelError(
            "timeout", "SMTP_TIMEOUT", f"the relay did not answer: {what}", ambiguous=ambiguous
        )
    return ChannelError(
        "transient", "SMTP_CONNECTION_LOST", f"connection lost: {what}", ambiguous=ambiguous
    )
