"""Small pieces the three channels share: reading a settings table, trace context, timing.

Reading a table goes through ``TableReader`` so that every channel refuses the same things
the same way: a key of the wrong type, a missing required key, and above all a key nobody
reads (a typo such as ``read_timout_s`` must stop the start-up, not silently keep the
default).
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from reachstore_server.common import otel
from reachstore_server.common.config_errors import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names an error message may repeat: the usual upper-case form. Anything else may be the
# secret itself, pasted where its variable's name belongs (``whsec_...`` has no ``+`` or
# ``/`` one time in four), and a start error goes to terminals, logs and orchestrators.
_SHOWN_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
# A value that can travel in an HTTP header or gRPC metadata as it is: visible ASCII,
# inner spaces allowed, nothing around it (a file's trailing newline is the usual slip).
_HEADER_SAFE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


class TableReader:
    """Reads typed keys from one channel's settings table and remembers which it read.

    Every error names the key as ``<where>.<key>`` so that the operator can find it in the
    file. Call ``finish`` last: it refuses the keys that nothing read.
    """

    def __init__(self, table: Mapping[str, Any], where: str, env: Mapping[str, str]) -> None:
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: must be a table, not {type(table).__name__}")
        self._table = table
        self._where = where
        self._env = env
        self._read: list[str] = []

    def error(self, key: str, rule: str) -> ConfigError:
        return ConfigError(f"{self._where}.{key}: {rule}")

    def _get(self, key: str) -> Any:
        self._read.append(key)
        return self._table.get(key)

    def required_text(self, key: str) -> str:
        value = self._get(key)
        if value is None:
            raise self.error(key, "is required")
        return self._check_text(key, value)

    def optional_text(self, key: str) -> str | None:
        value = self._get(key)
        return None if value is None else self._check_text(key, value)

    def text(self, key: str, default: str) -> str:
        value = self._get(key)
        return default if value is None else self._check_text(key, value)

    def _check_text(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "must be a non-empty string")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, "must be true or false")
        return value

    def seconds(self, key: str, default: float) -> float:
        """A positive, finite number of seconds (an integer is accepted as well)."""
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, "must be a number of seconds")
        if not math.isfinite(value) or value <= 0:
            raise self.error(key, "must be a positive, finite number of seconds")
        return float(value)

    def integer(self, key: str, default: int, *, low: int, high: int) -> int:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, "must be an integer")
        if not low <= value <= high:
            raise self.error(key, f"must be between {low} and {high}")
        return value

    def secret(self, key: str, *, header: bool = False) -> str | None:
        """Reads the NAME of an environment variable and returns that variable's value.

        Secrets never sit in the settings file; a named variable that is unset or empty is
        an error now rather than a failed authentication at the first action. With
        ``header``, the value is sent in a header as it is, so one that cannot be (a
        control character, a space around it) is refused now too: else every send fails,
        and the HTTP library's message, stored on the action, would quote the value.
        Messages never hold a value, and repeat a name only in the usual upper-case form.
        """
        name = self._get(key)
        if name is None:
            return None
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise self.error(key, "must name an environment variable (letters, digits, _)")
        shown = (
            f"environment variable {name}"
            if _SHOWN_ENV_NAME.fullmatch(name)
            else "the environment variable it names (not repeated here: a name not in "
            "upper case may be a secret pasted in place of its variable's name)"
        )
        value = self._env.get(name)
        if value is None:
            raise self.error(key, f"{shown} is not set")
        if not value:
            raise self.error(key, f"{shown} is empty")
        if header and not _HEADER_SAFE.fullmatch(value):
            raise self.error(
                key,
                f"{shown} holds a value that cannot be sent in a header as it is: visible "
                "ASCII only, with no space or line break around it (often a file's trailing "
                "newline); the value is not shown",
            )
        return value

    def finish(self) -> None:
        """Refuses every key that was not read: typos must not pass silently."""
        unknown = sorted(str(key) for key in self._table if key not in self._read)
        if unknown:
            known = ", ".join(sorted(set(self._read)))
            raise self.error(unknown[0], f"unknown key (known keys: {known})")


def json_default(value: object) -> object:
    """``json.dumps``'s fallback: read-only mappings (``MappingProxyType`` and the like) and
    tuples are written as objects and arrays; anything else is not JSON."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def traceparent(trace_id: str) -> str:
    """A W3C ``traceparent`` value: with tracing on, the current span's (the send's span,
    which the exported trace holds); else the action's trace id and a fresh span id. Never
    a caller's header passed through.

    A trace id that is not 32 lowercase hex digits (or is all zeros, which W3C forbids)
    is replaced by a stable digest of itself, so that the receiver still sees one trace
    per action rather than a header it must drop.
    """
    current = otel.current_traceparent()
    if current:
        return current
    if not _TRACE_ID.fullmatch(trace_id) or trace_id == "0" * 32:
        trace_id = hashlib.sha256(trace_id.encode()).hexdigest()[:32]
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


class Stopwatch:
    """Milliseconds since creation, for ``duration_ms``."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def ms(self) -> int:
        return int((time.perf_counter() - self._start) * 1000)
