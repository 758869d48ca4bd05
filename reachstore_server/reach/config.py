"""The reach configuration file: channels, their limits and rules, and the engine's knobs.

TOML, read once at start (``REACHSTORE_REACH_CONFIG`` names the file). Secrets never
appear in it, only the names of the environment variables that hold them. Every mistake
is a ``ConfigError`` naming the key, so a typo stops the service instead of being ignored.
The README's "Reach" section shows a complete file; ``examples/reach.toml`` is one.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reachstore_server.common import names
from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.windows import WINDOWS
from reachstore_server.reach import states as st
from reachstore_server.reach.baseline import BaselinePolicy
from reachstore_server.reach.channels.base import Channel
from reachstore_server.reach.constraints import ParamRules
from reachstore_server.reach.dedupe_archive import (
    DEFAULT_RETENTION_DAYS,
    MAX_RETENTION_DAYS,
    MIN_RETENTION_DAYS,
)
from reachstore_server.reach.policy.backoff import PendingPolicy, PollPolicy, RetryPolicy
from reachstore_server.reach.policy.breaker import BreakerPolicy

KINDS = ("webhook", "email", "grpc")
QUOTA_SHARE = 0.7
_CHANNEL_KEYS = {
    "kind",
    "description",
    "side_effect",
    "action_types",
    "idempotent",
    "receiver_deduplicates",
    "idempotency_params",
    "window",
    "quota_per_second",
    "parameters",
    "rules",
    "retry",
    "breaker",
    "unknown",
    "pending",
    *KINDS,
}
_ENGINE_KEYS = {
    "workers",
    "lease_s",
    "alert_channel",
    "logical_time_tolerance_s",
    "dedupe_retention_days",
    "alert_channels",
    "baseline",
}
# A send must end this long before its lease does: the answer is still to be recorded
# (one transaction) under the same lease. See docs/AT_MOST_ONCE.md.
LEASE_MARGIN_S = 1.0


@dataclasses.dataclass(frozen=True)
class ChannelConfig:
    """One channel as declared: what it is for the agent, how actions on it are keyed,
    and how the executor treats it."""

    name: str
    kind: str
    description: str
    side_effect: str
    action_types: tuple[str, ...]
    # Repeating an action on this channel is harmless, so an ambiguous outcome (a timeout
    # after sending) may be retried; otherwise it becomes UNKNOWN.
    idempotent: bool
    # The receiver de-duplicates by the idempotency key we send, so re-sending under the
    # same key is harmless too. Only the configuration can promise this: sending the key
    # is not the receiver honouring it. Default: it does not.
    receiver_deduplicates: bool
    idempotency_params: tuple[str, ...]
    window: str
    quota_per_second: float | None
    rules: ParamRules
    retry: RetryPolicy
    breaker: BreakerPolicy
    unknown: PollPolicy
    pending: PendingPolicy
    options: Mapping[str, Any]  # the kind's own table, read by ``channels.build_channel``

    @property
    def send_rate_per_second(self) -> float:
        """The rate actions are sent at (0: no limit): a share of the declared quota,
        because the receiver may count differently than we do."""
        return round(self.quota_per_second * QUOTA_SHARE, 6) if self.quota_per_second else 0.0

    @property
    def safe_to_resend(self) -> bool:
        """Whether an action whose send may have arrived can be sent again: only when
        repeating it is harmless or the receiver drops the repeat."""
        return self.idempotent or self.receiver_deduplicates


@dataclasses.dataclass(frozen=True)
class ReachConfig:
    channels: Mapping[str, ChannelConfig]
    workers: int = 16  # actions one reach process works on at once
    lease_s: float = 30.0  # how long a claimed action stays with its worker
    alert_channel: str = ""  # channel that carries alerts; empty: alerts are only stored
    # How far a caller's ``logical_time`` may lie from the server's clock: the server owns
    # the idempotency window, a caller may only name a moment near "now" (a retry that
    # crosses a window boundary keeps its first moment).
    logical_time_tolerance_s: float = 300.0
    # Days a finished task's keys stay in the live tables before they move to the dedupe
    # archive, which still refuses duplicates (reachstore_server/reach/dedupe_archive.py).
    dedupe_retention_days: int = DEFAULT_RETENTION_DAYS
    # Failure kind -> the channel carrying its alerts (``business`` to the people who own
    # the requests, ``technical`` to operations); a kind left out goes to ``alert_channel``.
    alert_channels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # How each channel's failure rate, UNKNOWN rate and latency p99 are judged against
    # their own history before they alert (reachstore_server/reach/baseline.py).
    baseline: BaselinePolicy = BaselinePolicy()

    def alert_route(self, failure_kind: str) -> str:
        """The channel an alert of ``failure_kind`` goes to; "" when it is only stored."""
        return self.alert_channels.get(failure_kind, self.alert_channel)

    @property
    def routed_failure_kinds(self) -> tuple[str, ...]:
        """The failure kinds whose alerts have a channel to go to."""
        return tuple(kind for kind in st.FAILURE_KINDS if self.alert_route(kind))


def load_config(path: Path | None) -> ReachConfig:
    """Reads and checks the file; no file means no channels (reach refuses every action)."""
    if path is None:
        return ReachConfig(channels={})
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"REACHSTORE_REACH_CONFIG: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))


def parse_config(data: Mapping[str, Any], source: str = "reach config") -> ReachConfig:
    unknown = set(data) - {"engine", "channels"}
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {sorted(unknown)}; use engine, channels")
    engine = _table(data.get("engine", {}), "engine")
    _no_unknown(engine, _ENGINE_KEYS, "engine")
    channels_table = _table(data.get("channels", {}), "channels")
    channels = {
        name: _channel(name, _table(table, f"channels.{name}"))
        for name, table in channels_table.items()
    }
    workers = _number(engine, "workers", "engine", 16, int)
    lease_s = _number(engine, "lease_s", "engine", 30.0, float)
    tolerance = _number(engine, "logical_time_tolerance_s", "engine", 300.0, float)
    if not 0 <= tolerance <= 7 * 86400:
        raise ConfigError("engine.logical_time_tolerance_s: must be 0 to 604800 seconds")
    if not 1 <= workers <= 1024:
        raise ConfigError("engine.workers: must be 1 to 1024")
    if lease_s < 2:
        raise ConfigError("engine.lease_s: must be at least 2 seconds")
    alert = engine.get("alert_channel", "")
    if not isinstance(alert, str) or (alert and alert not in channels):
        raise ConfigError("engine.alert_channel: must name a channel declared in this file")
    retention = _number(engine, "dedupe_retention_days", "engine", DEFAULT_RETENTION_DAYS, int)
    if not MIN_RETENTION_DAYS <= retention <= MAX_RETENTION_DAYS:
        raise ConfigError(
            f"engine.dedupe_retention_days: must be {MIN_RETENTION_DAYS} to "
            f"{MAX_RETENTION_DAYS} days (the weekly UNKNOWN review reads the live rows)"
        )
    routes = _table(engine.get("alert_channels", {}), "engine.alert_channels")
    for kind, name in routes.items():
        if kind not in st.FAILURE_KINDS:
            raise ConfigError(
                f"engine.alert_channels.{kind}: unknown failure kind (use "
                f"{', '.join(st.FAILURE_KINDS)})"
            )
        if not isinstance(name, str) or name not in channels:
            raise ConfigError(
                f"engine.alert_channels.{kind}: must name a channel declared in this file"
            )
    policy = BaselinePolicy.from_table(
        _table(engine.get("baseline", {}), "engine.baseline"), "engine.baseline"
    )
    if policy.days >= retention:
        # A judgement reads the live rows; the archive takes them after the retention.
        raise ConfigError(
            f"engine.baseline.days: must be below engine.dedupe_retention_days ({retention}):"
            " older actions leave the live tables the baseline is read from"
        )
    return ReachConfig(
        channels, workers, lease_s, alert, tolerance, retention, dict(routes), policy
    )


def check_channels(config: ReachConfig, channels: Mapping[str, Channel]) -> None:
    """The checks that need the built channels (``main`` runs them before serving):

    - every send ends ``LEASE_MARGIN_S`` before its lease does, since a send that outlived
      its lease would be taken over while still in flight;
    - a receiver said to de-duplicate is sent the key it would de-duplicate by.
    """
    room = config.lease_s - LEASE_MARGIN_S
    for name, cfg in sorted(config.channels.items()):
        channel = channels[name]
        what, seconds = channel.send_deadline()
        if seconds > room:
            raise ConfigError(
                f"channels.{name}.{cfg.kind}: a send may take {seconds:g} s ({what}), which "
                f"must be at most engine.lease_s ({config.lease_s:g} s) minus "
                f"{LEASE_MARGIN_S:g} s; shorten the timeouts or lengthen the lease"
            )
        if cfg.receiver_deduplicates and not channel.sends_idempotency_key:
            raise ConfigError(
                f"channels.{name}.receiver_deduplicates: the channel does not send the "
                "idempotency key, so the receiver cannot de-duplicate by it"
            )


def _channel(name: str, table: Mapping[str, Any]) -> ChannelConfig:
    where = f"channels.{name}"
    if not names.is_namespace_name(name):
        raise ConfigError(f"{where}: a channel name must be {names.NAMESPACE_RULE}")
    _no_unknown(table, _CHANNEL_KEYS, where)
    kind = table.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(KINDS)}")
    for other in KINDS:
        if other != kind and other in table:
            raise ConfigError(f"{where}.{other}: a {kind} channel takes a [{where}.{kind}] table")
    description = _text(table, "description", where, required=True)
    action_types = _strings(table, "action_types", where)
    if not action_types:
        raise ConfigError(f"{where}.action_types: list at least one action type")
    for i, action_type in enumerate(action_types):
        if not names.is_namespace_name(action_type):
            raise ConfigError(f"{where}.action_types[{i}]: must be {names.NAMESPACE_RULE}")
    window = table.get("window", "day")
    if window not in WINDOWS:
        raise ConfigError(f"{where}.window: must be one of {', '.join(WINDOWS)}")
    quota = table.get("quota_per_second")
    if quota is not None and (isinstance(quota, bool) or not isinstance(quota, int | float)):
        raise ConfigError(f"{where}.quota_per_second: must be a number")
    if quota is not None and quota <= 0:
        raise ConfigError(f"{where}.quota_per_second: must be above 0 (leave it out: no limit)")
    idempotent = table.get("idempotent", False)
    if not isinstance(idempotent, bool):
        raise ConfigError(f"{where}.idempotent: must be true or false")
    deduplicates = table.get("receiver_deduplicates", False)
    if not isinstance(deduplicates, bool):
        raise ConfigError(f"{where}.receiver_deduplicates: must be true or false")
    rules = table.get("rules", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{where}.rules: must be an array of tables ([[{where}.rules]])")
    return ChannelConfig(
        name=name,
        kind=kind,
        description=description,
        side_effect=_text(table, "side_effect", where, required=False)
        or f"Sends to a system outside reachstore through {kind}; it cannot be undone here.",
        action_types=action_types,
        idempotent=idempotent,
        receiver_deduplicates=deduplicates,
        idempotency_params=_strings(table, "idempotency_params", where),
        window=window,
        quota_per_second=float(quota) if quota is not None else None,
        rules=ParamRules.compile(table.get("parameters"), rules, where),
        retry=RetryPolicy.from_table(
            _table(table.get("retry", {}), f"{where}.retry"), f"{where}.retry"
        ),
        breaker=BreakerPolicy.from_table(
            _table(table.get("breaker", {}), f"{where}.breaker"), f"{where}.breaker"
        ),
        unknown=PollPolicy.from_table(
            _table(table.get("unknown", {}), f"{where}.unknown"), f"{where}.unknown"
        ),
        pending=PendingPolicy.from_table(
            _table(table.get("pending", {}), f"{where}.pending"), f"{where}.pending"
        ),
        options=_table(table.get(kind, {}), f"{where}.{kind}"),
    )


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table")
    return value


def _no_unknown(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
        )


def _text(table: Mapping[str, Any], key: str, where: str, required: bool) -> str:
    value = table.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ConfigError(f"{where}.{key}: must be a non-empty string")
    return value


def _strings(table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}.{key}: must be a list of non-empty strings")
    return tuple(value)


def _number(table: Mapping[str, Any], key: str, where: str, default: Any, kind: type) -> Any:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}.{key}: must be a number")
    # TOML has nan and inf: neither is a count, a duration or a rate, and nan slips past
    # every range check (each comparison with it is false).
    if not math.isfinite(value):
        raise ConfigError(f"{where}.{key}: must be a finite number, got {value}")
    if kind is int and value != int(value):
        raise ConfigError(f"{where}.{key}: must be a whole number")
    return kind(value)
