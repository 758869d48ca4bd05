"""The executor: claims due actions from the store and moves each one step forward.

One step per claim, decided by the action's state:

- READY: ask the channel's circuit breaker and token bucket, mark the action SUBMITTING
  (committed before anything is sent: a worker that dies from here on leaves a trace),
  send once, and record what came back — succeeded, pending, a retry at a computed time,
  UNKNOWN (an ambiguous outcome on a channel where re-sending is not known to be harmless),
  or failed.
- PENDING: look the outcome up; past the channel's stall timeout it becomes UNKNOWN.
- UNKNOWN: look it up again with exponential backoff; after the configured number of
  tries it goes to NEEDS_REVIEW for a person (``ResolveAction``).
- SUBMITTING (its lease ran out: the worker died mid-send): re-send with the same key only
  where the receiver honours idempotency keys or the action type is idempotent; otherwise
  UNKNOWN. Never a blind re-send.

Retries, breakers and rate limits are the executor's, the same for every channel; the
channels only speak their protocols and classify answers (``channels/base.py``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from services.common import errors
from services.reach import states as st
from services.reach.channels.base import Answer, Channel, ChannelError, Outgoing, Status
from services.reach.config import ChannelConfig, ReachConfig
from services.reach.metrics import BREAKER_VALUES, ReachMetrics
from services.reach.policy.breaker import CircuitBreaker
from services.reach.policy.bucket import SendBucket, TokenBucket
from services.reach.store import Change, Claim, ReachStore, Receipt, Settled
from services.reach.watch import TaskChanges

log = logging.getLogger(__name__)

# How often an idle worker looks for due actions written by other processes. Actions
# submitted to this process wake it at once.
IDLE_POLL_SECONDS = 0.2
ALERT_SWEEP_SECONDS = 10.0
ALERT_MAX_ATTEMPTS = 5
# Breaker outcomes: these categories say the receiver (or the way to it) is unwell.
_UNHEALTHY = frozenset({"transient", "timeout", "quota", "auth"})


class Executor:
    def __init__(
        self,
        store: ReachStore,
        config: ReachConfig,
        channels: Mapping[str, Channel],
        mask: Callable[[str], str],
        metrics: ReachMetrics,
        worker_id: str,
        changes: TaskChanges,
        rng: random.Random | None = None,
        buckets: Mapping[str, SendBucket] | None = None,
    ) -> None:
        """``buckets``: the send-rate bucket of each channel with a quota; by default one
        per channel in this process (``main`` passes the database-shared ones)."""
        self._store = store
        self._config = config
        self._channels = channels
        self._mask = mask
        self._metrics = metrics
        self._worker = worker_id
        self._changes = changes
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._alert_lock = asyncio.Lock()
        self.breakers = {
            name: CircuitBreaker.from_policy(cfg.breaker, on_change=self._breaker_changed(name))
            for name, cfg in config.channels.items()
        }
        self._buckets: Mapping[str, SendBucket] = (
            buckets
            if buckets is not None
            else {
                name: TokenBucket(cfg.send_rate_per_second)
                for name, cfg in config.channels.items()
                if cfg.send_rate_per_second
            }
        )
        for name in config.channels:
            metrics.breaker.labels(name).set(0)

    def _breaker_changed(self, channel: str) -> Callable[[str, str], None]:
        def changed(old: str, new: str) -> None:
            log.warning("breaker of channel %s: %s -> %s", channel, old, new)
            self._metrics.breaker.labels(channel).set(BREAKER_VALUES[new])

        return changed

    def wake(self) -> None:
        """New work was reserved in this process: look for it now."""
        self._wake.set()

    # --- the loop --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        inflight: set[asyncio.Task[None]] = set()
        sweeper = asyncio.create_task(self._alert_sweeper(stop))
        try:
            while not stop.is_set():
                free = self._config.workers - len(inflight)
                claims: list[Claim] = []
                if free > 0:
                    try:
                        claims = await asyncio.to_thread(
                            self._store.claim, self._worker, free, time.time(), self._config.lease_s
                        )
                    except Exception:  # noqa: BLE001 - the store may be restarting; try again
                        log.exception("claiming due actions failed")
                for claim in claims:
                    task = asyncio.create_task(self._step(claim))
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                    task.add_done_callback(lambda _t: self._wake.set())
                if claims and len(claims) == free:
                    continue  # there may be more due right now
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), IDLE_POLL_SECONDS)
                except TimeoutError:
                    pass
        finally:
            sweeper.cancel()
            # Sends in flight finish (their outcome is recorded); the rest keep their lease
            # and are taken over when it expires.
            if inflight:
                await asyncio.wait(inflight, timeout=10)

    async def _step(self, claim: Claim) -> None:
        try:
            cfg = self._config.channels.get(claim.channel)
            channel = self._channels.get(claim.channel)
            if cfg is None or channel is None:
                await self._channel_gone(claim)
            elif claim.state == st.READY:
                await self._send(claim, cfg, channel)
            elif claim.state == st.SUBMITTING:
                await self._lost_send(claim, cfg, channel)
            elif claim.state == st.PENDING:
                await self._check_pending(claim, cfg, channel)
            elif claim.state == st.UNKNOWN:
                await self._recheck_unknown(claim, cfg, channel)
        except Exception:  # noqa: BLE001 - one action's trouble must not stop the others
            # The lease runs out and the action is taken up again by the rules above.
            log.exception("working on action %s failed", claim.action_id)

    # --- READY: send -----------------------------------------------------------------------

    async def _send(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        breaker = self.breakers[claim.channel]
        wait = breaker.before_call()
        if wait > 0:
            await self._settle(
                claim,
                Change(
                    st.READY,
                    "breaker_open",
                    {"retry_in_s": round(wait, 3)},
                    next_at=time.time() + wait,
                ),
            )
            return
        waited = 0.0
        bucket = self._buckets.get(claim.channel)
        if bucket is not None:
            waited = await bucket.acquire()
            self._metrics.limiter_wait.labels(claim.channel).observe(waited)
        attempt = claim.attempts + 1
        marked = await self._settle(
            claim,
            Change(
                st.SUBMITTING,
                "sending",
                {"attempt": attempt, "limiter_wait_s": round(waited, 3)},
                next_at=time.time() + self._config.lease_s,
                add_attempt=True,
                keep_lease=True,
            ),
        )
        if not marked.applied:
            breaker.record(True)  # the permit was not used; do not count it against the receiver
            return
        self._metrics.sends.labels(claim.channel).inc()
        outgoing = _outgoing(claim)
        started = time.monotonic()
        try:
            answer = await channel.submit(outgoing)
        except ChannelError as exc:
            breaker.record(exc.category not in _UNHEALTHY and exc.business)
            await self._send_failed(claim, cfg, channel, exc, attempt)
            return
        except Exception as exc:  # noqa: BLE001 - a channel bug: treat as a lost connection
            log.exception("channel %s raised on submit", claim.channel)
            breaker.record(False)
            lost = ChannelError(
                "transient",
                "RECEIVER_ERROR",
                f"the channel failed unexpectedly: {type(exc).__name__}",
                ambiguous=True,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
            await self._send_failed(claim, cfg, channel, lost, attempt)
            return
        breaker.record(True)
        receipt = self._receipt(attempt, "submit", answer)
        if answer.status == Status.SUCCESS:
            await self._settle(
                claim,
                Change(
                    st.SUCCEEDED,
                    "receiver_confirmed",
                    external_id=answer.external_id,
                    receipt=receipt,
                ),
            )
        elif answer.status == Status.PENDING:
            now = time.time()
            await self._settle(
                claim,
                Change(
                    st.PENDING,
                    "receiver_accepted",
                    next_at=now + cfg.pending.poll_interval_s,
                    external_id=answer.external_id,
                    accepted_at=now,
                    receipt=receipt,
                ),
            )
        else:  # a channel must not answer FAILED/UNKNOWN to a submit; be safe anyway
            await self._to_unknown(claim, cfg, "ambiguous_outcome", answer.detail, receipt)

    async def _send_failed(
        self, claim: Claim, cfg: ChannelConfig, channel: Channel, exc: ChannelError, attempt: int
    ) -> None:
        receipt = Receipt(
            attempt,
            "submit",
            "error",
            status_code=exc.status_code,
            snippet=self._mask(exc.snippet),
            duration_ms=exc.duration_ms,
        )
        kind = "business" if exc.business else "technical"
        message = self._mask(exc.message)
        if exc.ambiguous and not _safe_to_resend(cfg, channel):
            await self._to_unknown(
                claim, cfg, "ambiguous_outcome", f"{exc.code}: {message}", receipt
            )
            return
        now = time.time()
        elapsed = now - (claim.first_sent_at or now)
        failure: dict[str, Any] = {
            "code": exc.code,
            "message": message,
            "data": {"attempt": attempt},
        }
        if exc.category == "quota":
            delay = cfg.retry.rate_limited_delay(claim.rate_limited, exc.retry_after_s, self._rng)
            if (
                claim.rate_limited < cfg.retry.max_rate_limited
                and elapsed + delay <= cfg.retry.deadline_s
            ):
                self._metrics.retries.labels(claim.channel, "rate_limited").inc()
                details: dict[str, Any] = {
                    "retry_in_s": round(delay, 3),
                    "retry_after_s": exc.retry_after_s,
                }
                await self._retry_later(
                    claim, "rate_limited", delay, details, failure, kind, receipt, rate_limited=True
                )
                return
            reason = "rate_limited_too_often"
        elif exc.category in ("transient", "timeout"):
            retries = attempt - 1 - claim.rate_limited
            delay = cfg.retry.delay(retries, self._rng)
            if cfg.retry.should_retry(retries, elapsed, delay):
                self._metrics.retries.labels(claim.channel, "transient").inc()
                details = {"retry_in_s": round(delay, 3), "code": exc.code}
                await self._retry_later(
                    claim, "retry_scheduled", delay, details, failure, kind, receipt
                )
                return
            reason = "retries_exhausted"
        else:
            reason = "rejected"
        failure["data"]["final"] = True
        await self._settle(
            claim,
            Change(
                st.FAILED,
                reason,
                {"code": exc.code},
                failure=failure,
                failure_kind=kind,
                receipt=receipt,
            ),
        )

    async def _retry_later(
        self,
        claim: Claim,
        reason: str,
        delay: float,
        details: dict[str, Any],
        failure: dict[str, Any],
        kind: str,
        receipt: Receipt,
        rate_limited: bool = False,
    ) -> None:
        """Back to READY, due after ``delay``; the failure says when, for the caller."""
        failure["retry_after_ms"] = int(delay * 1000)
        await self._settle(
            claim,
            Change(
                st.READY,
                reason,
                details,
                next_at=time.time() + delay,
                failure=failure,
                failure_kind=kind,
                receipt=receipt,
                add_rate_limited=rate_limited,
            ),
        )

    # --- SUBMITTING whose lease ran out ----------------------------------------------------

    async def _lost_send(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        if _safe_to_resend(cfg, channel):
            self._metrics.retries.labels(claim.channel, "resend").inc()
            await self._settle(
                claim, Change(st.READY, "worker_lost_resending", next_at=time.time())
            )
        else:
            await self._to_unknown(
                claim,
                cfg,
                "worker_lost_mid_send",
                "the worker sending it stopped before recording the answer",
            )

    # --- PENDING and UNKNOWN: look the outcome up -----------------------------------------

    async def _check_pending(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        now = time.time()
        if claim.accepted_at is not None and cfg.pending.stalled(now - claim.accepted_at):
            await self._to_unknown(
                claim,
                cfg,
                "pending_stalled",
                f"no outcome within the stall timeout of {cfg.pending.stall_timeout_s:g} s",
                code=errors.PENDING_STALLED.code,
            )
            return
        answer = await self._poll(claim, channel)
        if answer.status == Status.PENDING:
            await self._settle(
                claim,
                Change(
                    st.PENDING,
                    "still_pending",
                    next_at=now + cfg.pending.poll_interval_s,
                    add_poll=True,
                ),
            )
        elif answer.status == Status.UNKNOWN:
            await self._to_unknown(
                claim,
                cfg,
                "lookup_undecided",
                answer.detail,
                self._receipt(claim.attempts, "poll", answer),
                add_poll=True,
            )
        else:
            await self._settle_by_lookup(claim, answer)

    async def _recheck_unknown(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        now = time.time()
        if not channel.can_poll:
            await self._to_review(claim, "cannot_look_up", "the channel has no status look-up")
            return
        answer = await self._poll(claim, channel)
        receipt = self._receipt(claim.attempts, "poll", answer)
        # "Still pending" settles nothing for an action that already stalled: it counts as
        # an undecided look-up, so a receiver that never finishes ends in review.
        stalled = claim.accepted_at is not None and cfg.pending.stalled(now - claim.accepted_at)
        if answer.status == Status.PENDING and not stalled:
            await self._settle(
                claim,
                Change(
                    st.PENDING,
                    "receiver_pending",
                    next_at=now + cfg.pending.poll_interval_s,
                    accepted_at=now,
                    add_poll=True,
                    receipt=receipt,
                ),
            )
        elif answer.status in (Status.UNKNOWN, Status.PENDING):
            tries = claim.unknown_polls + 1
            if tries >= cfg.unknown.max_polls:
                await self._to_review(
                    claim, "rechecks_exhausted", f"{tries} look-ups could not decide", receipt
                )
                return
            delay = cfg.unknown.delay(tries, self._rng)
            await self._settle(
                claim,
                Change(
                    st.UNKNOWN,
                    "recheck_scheduled",
                    {"retry_in_s": round(delay, 3), "lookups": tries},
                    next_at=now + delay,
                    add_poll=True,
                    add_unknown_poll=True,
                    receipt=receipt,
                ),
            )
        else:
            await self._settle_by_lookup(claim, answer)

    async def _poll(self, claim: Claim, channel: Channel) -> Answer:
        try:
            # Without an id from the receiver (the send's answer was lost), the action is
            # looked up by its idempotency key, which is what the receiver was given.
            return await channel.poll(_outgoing(claim), claim.external_id or claim.idem_key)
        except Exception as exc:  # noqa: BLE001 - a look-up that fails decides nothing
            log.exception("channel %s raised on poll", claim.channel)
            return Answer(Status.UNKNOWN, detail=f"look-up failed: {type(exc).__name__}")

    async def _settle_by_lookup(self, claim: Claim, answer: Answer) -> None:
        receipt = self._receipt(claim.attempts, "poll", answer)
        if answer.status == Status.SUCCESS:
            await self._settle(
                claim, Change(st.SUCCEEDED, "receiver_confirmed", receipt=receipt, add_poll=True)
            )
            return
        failure = {
            "code": errors.RECEIVER_REPORTED_FAILURE.code,
            "message": self._mask(answer.detail) or errors.RECEIVER_REPORTED_FAILURE.description,
            "data": {"final": True},
        }
        await self._settle(
            claim,
            Change(
                st.FAILED,
                "receiver_reported_failure",
                failure=failure,
                failure_kind="business",
                receipt=receipt,
                add_poll=True,
            ),
        )

    async def _to_unknown(
        self,
        claim: Claim,
        cfg: ChannelConfig,
        reason: str,
        why: str,
        receipt: Receipt | None = None,
        code: str = errors.OUTCOME_UNKNOWN.code,
        add_poll: bool = False,
    ) -> None:
        delay = cfg.unknown.delay(0, self._rng)
        failure = {
            "code": code,
            "message": f"outcome unknown: {self._mask(why)}",
            "retry_after_ms": int(delay * 1000),
            "data": {"cause": reason},
        }
        await self._settle(
            claim,
            Change(
                st.UNKNOWN,
                reason,
                {"recheck_in_s": round(delay, 3)},
                next_at=time.time() + delay,
                failure=failure,
                failure_kind="technical",
                receipt=receipt,
                add_poll=add_poll,
            ),
        )

    async def _to_review(
        self, claim: Claim, reason: str, why: str, receipt: Receipt | None = None
    ) -> None:
        failure = {
            "code": errors.REVIEW_REQUIRED.code,
            "message": f"needs review: {why}",
            "data": {"cause": reason},
        }
        await self._settle(
            claim,
            Change(
                st.NEEDS_REVIEW, reason, failure=failure, failure_kind="technical", receipt=receipt
            ),
        )

    async def _channel_gone(self, claim: Claim) -> None:
        """The action's channel was removed from the configuration."""
        if claim.state == st.READY:
            failure = {
                "code": errors.CHANNEL_NOT_ALLOWED.code,
                "message": f"channel {claim.channel!r} is no longer configured",
                "data": {"final": True},
            }
            await self._settle(
                claim,
                Change(st.FAILED, "channel_removed", failure=failure, failure_kind="technical"),
            )
        else:  # it may have been sent: only a person can tell
            await self._to_review(claim, "channel_removed", "its channel is no longer configured")

    # --- writing ---------------------------------------------------------------------------

    async def _settle(self, claim: Claim, change: Change) -> Settled:
        settled = await asyncio.to_thread(self._store.settle, claim, change)
        if not settled.applied:
            log.warning("lost the lease of action %s; its new owner decides", claim.action_id)
            return settled
        self._changes.notify(claim.task_id)
        self._metrics.transitions.labels(claim.channel, change.to_state).inc()
        if change.to_state in st.FINAL:
            self._metrics.latency.labels(claim.channel).observe(time.time() - claim.created_at)
        log.info(
            "action %s %s -> %s (%s)",
            claim.action_id,
            claim.state,
            change.to_state,
            change.reason,
            extra={
                "trace_id": claim.trace_id,
                "task_id": claim.task_id,
                "action_id": claim.action_id,
                "channel": claim.channel,
                "state": change.to_state,
                "reason": change.reason,
            },
        )
        if settled.alerts:
            self._wake_alerts()
        return settled

    def _receipt(self, attempt: int, operation: str, answer: Answer) -> Receipt:
        outcome = {
            Status.SUCCESS: "succeeded",
            Status.PENDING: "pending" if operation == "poll" else "accepted",
            Status.FAILED: "failed",
            Status.UNKNOWN: "unknown",
        }[answer.status]
        return Receipt(
            attempt,
            operation,
            outcome,
            external_id=answer.external_id,
            status_code=answer.status_code,
            snippet=self._mask(answer.snippet),
            duration_ms=answer.duration_ms,
        )

    # --- alerts ----------------------------------------------------------------------------

    def _wake_alerts(self) -> None:
        if self._config.alert_channel:
            asyncio.get_running_loop().create_task(self._deliver_alerts())

    async def _alert_sweeper(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and self._config.alert_channel:
            await self._deliver_alerts()
            await asyncio.sleep(ALERT_SWEEP_SECONDS)

    async def _deliver_alerts(self) -> None:
        async with self._alert_lock:  # the sweeper and a fresh alert must not both send it
            await self._deliver_pending_alerts()

    async def _deliver_pending_alerts(self) -> None:
        channel = self._channels[self._config.alert_channel]
        try:
            pending = await asyncio.to_thread(
                self._store.undelivered_alerts, 50, ALERT_MAX_ATTEMPTS
            )
        except Exception:  # noqa: BLE001 - retried on the next sweep
            log.exception("reading undelivered alerts failed")
            return
        for alert in pending:
            params: dict[str, Any] = {
                "kind": alert.kind,
                "tenant": alert.tenant,
                "task_id": alert.task_id,
                "action_id": alert.action_id,
                "message": alert.message,
            }
            outgoing = Outgoing(
                action_id=f"alert-{alert.id}",
                idempotency_key=f"reachstore-alert-{alert.id}",
                action_type="alert",
                params=params,
                trace_id=secrets.token_hex(16),
                tenant=alert.tenant,
                entity_id=alert.task_id,
            )
            try:
                await channel.submit(outgoing)
                ok, error = True, ""
            except ChannelError as exc:
                ok, error = False, f"{exc.code}: {exc.message}"
            except Exception as exc:  # noqa: BLE001
                ok, error = False, type(exc).__name__
            await asyncio.to_thread(self._store.mark_alert, alert.id, ok, self._mask(error))


def _safe_to_resend(cfg: ChannelConfig, channel: Channel) -> bool:
    """Re-sending after an ambiguous outcome is harmless when the action type is declared
    idempotent or the receiver de-duplicates by our idempotency key."""
    return cfg.idempotent or channel.honours_idempotency_key


def _outgoing(claim: Claim) -> Outgoing:
    return Outgoing(
        action_id=claim.action_id,
        idempotency_key=claim.idem_key,
        action_type=claim.action_type,
        params=claim.params,
        trace_id=claim.trace_id,
        tenant=claim.tenant,
        entity_id=claim.entity_id,
    )
