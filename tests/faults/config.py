"""The channels under attack and the reach configuration file that declares them.

Every combination of "the action is idempotent" and "the receiver de-duplicates by
``Idempotency-Key``", each with and without a status look-up: the executor may re-send an
ambiguous send only when one of the two holds, and may settle an UNKNOWN outcome only
where it can look it up.

How a de-duplicating receiver is declared: ``receiver_deduplicates = true`` on the
channel. Code from before that key existed refuses it, so ``legacy=True`` writes what
such code understood instead (``idempotency_header = true`` in the webhook table);
channels whose receiver does not de-duplicate write neither line, which is what a
plain non-idempotent webhook looks like in practice. One more channel is told outright
not to send the key (``idempotency_header = false``), the one kind that code from before
already treated as "may not re-send".

Timings are short so that a run fits in minutes, and keep the rule the service enforces:
a webhook's worst-case send (connect + read timeout) fits in the lease with 2 s to spare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

ACTION_TYPE = "notify"
ALERT_CHANNEL = "alerts"


@dataclasses.dataclass(frozen=True)
class Timing:
    lease_s: float = 4.0
    connect_timeout_s: float = 0.5
    read_timeout_s: float = 1.5
    max_retries: int = 3
    max_rate_limited: int = 2
    workers: int = 24  # actions one reach process works on at once

    def __post_init__(self) -> None:
        assert self.lease_s >= self.connect_timeout_s + self.read_timeout_s + 2

    @property
    def send_deadline_s(self) -> float:
        """The whole send's deadline, as reach computes it for a webhook."""
        return self.connect_timeout_s + self.read_timeout_s

    @property
    def late_s(self) -> float:
        """How late a "late" answer comes: well past the read timeout."""
        return self.read_timeout_s + 1.0

    @property
    def trickle_s(self) -> float:
        """How long a trickled body takes: past the lease (that is the attack)."""
        return self.lease_s + 2.0

    @property
    def trickle_gap_s(self) -> float:
        """Between two bytes of a trickle: well inside the read timeout, so a client that
        times reads one at a time never gives up."""
        return self.read_timeout_s / 4

    @property
    def post_bound(self) -> int:
        """POSTs one action may cost without a worker dying: the first, the transient
        retries, the rate-limited retries, and one re-send after an ambiguous outcome."""
        return 2 + self.max_retries + self.max_rate_limited


@dataclasses.dataclass(frozen=True)
class Profile:
    """One channel: what reach is told about it, and how its receiver behaves."""

    name: str
    idempotent: bool
    dedupe: bool  # the receiver takes effect once per Idempotency-Key
    lookup: bool  # the channel has a status look-up
    sends_key: bool = True  # False: the receiver must not get an Idempotency-Key header

    @property
    def resend_harmless(self) -> bool:
        return self.idempotent or self.dedupe


def _profile(idempotent: bool, dedupe: bool, lookup: bool) -> Profile:
    name = "idem" if idempotent else "plain"
    name += "-dedup" if dedupe else ""
    name += "-lookup" if lookup else ""
    return Profile(name, idempotent, dedupe, lookup)


PROFILES = (
    *(
        _profile(idempotent, dedupe, lookup)
        for idempotent in (False, True)
        for dedupe in (False, True)
        for lookup in (False, True)
    ),
    # Told outright not to send the key: reach can never take this receiver for one that
    # de-duplicates, whatever its defaults, so an ambiguous send must end UNKNOWN.
    Profile("plain-nokey", idempotent=False, dedupe=False, lookup=False, sends_key=False),
)


def _channel(profile: Profile, url: str, status_url: str, timing: Timing, legacy: bool) -> str:
    dedupe_line = "receiver_deduplicates = true\n" if profile.dedupe and not legacy else ""
    header_line = "idempotency_header = true\n" if profile.dedupe and legacy else ""
    if not profile.sends_key:
        header_line = "idempotency_header = false\n"
    status_line = f'status_url = "{status_url}"\n' if profile.lookup else ""
    return f"""
[channels.{profile.name}]
kind = "webhook"
description = "{profile.name}: idempotent {profile.idempotent}, dedupe {profile.dedupe}"
action_types = ["{ACTION_TYPE}"]
idempotent = {str(profile.idempotent).lower()}
idempotency_params = ["intent"]
{dedupe_line}
[channels.{profile.name}.webhook]
url = "{url}"
{status_line}{header_line}connect_timeout_s = {timing.connect_timeout_s}
read_timeout_s = {timing.read_timeout_s}

[channels.{profile.name}.retry]
base_s = 0.1
cap_s = 0.4
max_retries = {timing.max_retries}
rate_limited_base_s = 0.3
rate_limited_cap_s = 0.6
max_rate_limited = {timing.max_rate_limited}

[channels.{profile.name}.breaker]
min_samples = 1000
open_s = 1

[channels.{profile.name}.pending]
poll_interval_s = 0.3
stall_timeout_s = 5

[channels.{profile.name}.unknown]
base_s = 0.3
cap_s = 0.6
max_polls = 2
"""


def write_config(
    path: Path,
    urls: Mapping[str, tuple[str, str]],
    alert_url: str,
    timing: Timing,
    legacy: bool,
) -> Path:
    """``urls``: channel name -> (delivery URL, status URL template) of its receiver."""
    by_name = {p.name: p for p in PROFILES}
    text = (
        f"[engine]\nworkers = {timing.workers}\nlease_s = {timing.lease_s}\n"
        f'alert_channel = "{ALERT_CHANNEL}"\n'
    )
    for name, (url, status_url) in urls.items():
        text += _channel(by_name[name], url, status_url, timing, legacy)
    text += f"""
[channels.{ALERT_CHANNEL}]
kind = "webhook"
description = "alerts of required failures and reviews, to their own receiver"
action_types = ["alert"]

[channels.{ALERT_CHANNEL}.webhook]
url = "{alert_url}"
connect_timeout_s = {timing.connect_timeout_s}
read_timeout_s = {timing.read_timeout_s}
"""
    path.write_text(text, encoding="utf-8")
    return path
