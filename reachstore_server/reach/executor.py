"""The executor: claims due actions from the store and moves each one step forward.

One step per claim, decided by the action's state:

- READY: ask the channel's circuit breaker, wait (taking nothing) until the token bucket
  has a token, mark the action SUBMITTING under a lease that has not run out by the
  database's clock (committed before anything is sent: a worker that dies from here on
  leaves a trace), take the token, check that the send fits in what is left of the lease,
  send once under one overall deadline, and record what came back — succeeded, pending, a
  retry at a computed time, UNKNOWN (an ambiguous outcome on a channel where re-sending is
  not known to be harmless, or a final failure after any ambiguous send), or failed.
- PENDING: look the outcome up; past the channel's stall timeout it becomes UNKNOWN.
- UNKNOWN: look it up again with exponential backoff; after the configured number of
  tries it goes to NEEDS_REVIEW for a person (``ResolveAction``).
- SUBMITTING (its lease ran out: the worker died or stalled mid-send): re-send with the
  same key only where the channel's config says the receiver de-duplicates by it or the
  action type is idempotent, and only within the retry budget; otherwise UNKNOWN. Never a
  blind re-send.

A send never outlives its lease: the configuration refuses a channel whose send deadline
does not end ``LEASE_MARGIN_S`` before the lease (``config.check_channels``), the mark
that precedes a send renews the lease by the database's clock, and the worker measures
the time since on its monotonic clock before it sends. docs/AT_MOST_ONCE.md has the whole
argument.

Retries, breakers and rate limits are the executor's, the same for every channel; the
channels only speak their protocols and classify answers (``channels/base.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import hashlib
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from reachstore_server.common import database_errors, errors, otel
from reachstore_server.reach import baseline
from reachstore_server.reach import states as st
from reachstore_server.reach.channels.base import Answer, Channel, ChannelError, Outgoing, Status
from reachstore_server.reach.config import LEASE_MARGIN_S, ChannelConfig, ReachConfig
from reachstore_server.reach.dedupe_archive import BATCH as DEDUPE_BATCH
from reachstore_server.reach.metrics import BREAKER_VALUES, ReachMetrics
from reachstore_server.reach.policy.breaker import CircuitBreaker
from reachstore_server.reach.policy.bucket import SendBucket, TokenBucket
from reachstore_server.reach.store import Change, Claim, ReachStore, Receipt, Settled
from reachstore_server.reach.watch import TaskChanges

log = logging.getLogger(__name__)
T = TypeVar("T")

# How often an idle worker looks for due actions written by other processes. Actions
# submitted to this process wake it at once.
IDLE_POLL_SECONDS = 0.2
ALERT_SWEEP_SECONDS = 10.0
# An alert is tried for about a day (2 s, 6 s, 18 s, 54 s, 162 s, then every 5 minutes)
# before it is left undelivered, in the reach_alerts table with its last error, and logged
# at error level. A receiver away for a deploy, or the alert channel down for a night,
# still gets it.
ALERT_MAX_ATTEMPTS = 290
ALERT_RETRY_CAP_S = 300.0
ALERT_BATCH = 50  # alerts one sweep delivers at most
ALERT_HOLD_S = 30.0  # at least; see Executor._alert_hold_s
ALERT_RETRY_BASE_S = 2.0  # a refused alert delivery is tried again after 2 s, 6 s, 18 s ...
# How often finished tasks past the dedupe retention are moved to the archive (a day is
# the retention's unit; an hour keeps each move small).
ARCHIVE_SWEEP_SECONDS = 3600.0
# How often each channel's signals are judged against their baselines (reach/baseline.py).
BASELINE_SWEEP_SECONDS = 300.0
# Breaker outcomes: these categories say the receiver (or the way to it) is unwell.
_UNHEALTHY = frozenset({"transient", "timeout", "quota", "auth"})
# How long a worker keeps trying to record an answer while the database is away: the
# answer is the one thing that cannot be had again.
RECORD_PATIENCE_S = 30.0
# A confirmation that comes after a takeover is offered this often, this far apart, while
# the worker that took over decides (one transaction).
LATE_ANSWER_TRIES = 12
LATE_ANSWER_PAUSE_S = 0.25
# Changes one transaction of the group commit carries at most (``GroupCommit``).
GROUP_COMMIT_MAX = 64


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
        # One action per channel at a time between "a token is there" and taking it, so
        # that this process's actions do not all mark themselves for the same token.
        self._token_locks = {name: asyncio.Lock() for name in config.channels}
        # Action id -> the lease and the last known row of the step under way on it.
        self._working: dict[str, _Held] = {}
        self._group = GroupCommit(store)
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

    def _done_with(self, action_id: str, _task: asyncio.Task[None]) -> None:
        self._working.pop(action_id, None)
        self._wake.set()

    def wake(self) -> None:
        """New work was reserved in this process: look for it now."""
        self._wake.set()

    # --- the loop --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        inflight: set[asyncio.Task[None]] = set()
        sweeper = asyncio.create_task(self._alert_sweeper(stop))
        archiver = asyncio.create_task(self._archive_sweeper(stop))
        judge = asyncio.create_task(self._baseline_sweeper(stop))
        try:
            while not stop.is_set():
                free = self._config.workers - len(inflight)
                claims: list[Claim] = []
                if free > 0:
                    try:
                        claims = await asyncio.to_thread(
                            self._store.claim, self._worker, free, self._config.lease_s
                        )
                    except Exception:  # noqa: BLE001 - the store may be restarting; try again
                        log.exception("claiming due actions failed")
                for claim in claims:
                    held = self._working.get(claim.action_id)
                    if held is not None:
                        # A step of this process is still on it, past its lease (a step of
                        # the database's clock, a stall). No second step starts. The step
                        # under way takes the new lease only if the row is as that step
                        # last left it, so nobody else acted on the action meanwhile (a
                        # clock step: its send's answer is still recorded,
                        # tests/e2e/test_redteam_db_clock_step.py). Otherwise another
                        # worker may have marked and sent it, which the step cannot know:
                        # under a live lease it would send again
                        # (tests/reach/test_stale_step_lease.py). It keeps its own lease,
                        # its writes fail, and once this claim's lease runs out the action
                        # is taken up afresh, from what is stored.
                        if _row_of(claim) == held.row:
                            held.lease = claim.lease
                        continue
                    self._working[claim.action_id] = _Held(claim.lease, _row_of(claim))
                    task = asyncio.create_task(self._step(claim))
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                    task.add_done_callback(functools.partial(self._done_with, claim.action_id))
                if claims and len(claims) == free:
                    continue  # there may be more due right now
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), IDLE_POLL_SECONDS)
                except TimeoutError:
                    pass
        finally:
            sweeper.cancel()
            archiver.cancel()
            judge.cancel()
            # Sends in flight finish (their outcome is recorded); the rest keep their lease
            # and are taken over when it expires.
            if inflight:
                await asyncio.wait(inflight, timeout=10)

    async def _step(self, claim: Claim) -> None:
        # With tracing on, the step is a span of the trace of the call that submitted the
        # task (``otel.action_span``), and the receiver sees it (or the HTTP/gRPC client span
        # under it) as the parent in its traceparent.
        attributes = {
            "reachstore.action_id": claim.action_id,
            "reachstore.task_id": claim.task_id,
            "reachstore.channel": claim.channel,
        }
        name = f"reach.action {claim.state.lower()}"
        with otel.action_span(name, claim.task_id, claim.trace_id, attributes):
            await self._step_traced(claim)

    async def _step_traced(self, claim: Claim) -> None:
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
                Change(st.READY, "breaker_open", {"retry_in_s": round(wait, 3)}, due_in=wait),
            )
            return
        what, deadline = channel.send_deadline()
        bucket = self._buckets.get(claim.channel)
        if bucket is None:
            marked_at = await self._mark_sending(claim)
            waited = 0.0
        else:
            async with self._token_locks[claim.channel]:
                marked_at, waited = await self._mark_with_token(claim, bucket)
        if marked_at is None:
            breaker.record(True)  # the permit was not used; do not count it against the receiver
            return
        # The lease runs until at least marked_at + lease_s (it was renewed by the
        # database after marked_at). A worker that stalled since (paused, starved) must
        # not start a send that could outlive it: the action goes back, nothing was sent.
        if not self._send_fits(marked_at, deadline):
            breaker.record(True)
            await self._settle(claim, Change(st.READY, "lease_too_short_to_send", due_in=0.0))
            return
        attempt = claim.attempts + 1
        self._metrics.sends.labels(claim.channel).inc()
        if waited:
            self._metrics.limiter_wait.labels(claim.channel).observe(waited)
        outgoing = _outgoing(claim)
        started = time.monotonic()
        try:
            async with asyncio.timeout(deadline):
                answer = await channel.submit(outgoing)
        except ChannelError as exc:
            breaker.record(exc.category not in _UNHEALTHY and exc.business)
            await self._send_failed(claim, cfg, exc, attempt)
            return
        except Exception as exc:  # noqa: BLE001 - the deadline, or a channel bug
            if not isinstance(exc, TimeoutError):
                log.exception("channel %s raised on submit", claim.channel)
            breaker.record(False)
            await self._send_failed(claim, cfg, _cut_off(exc, deadline, what, started), attempt)
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
                    add_attempt=True,
                ),
            )
        elif answer.status == Status.PENDING:
            await self._settle(
                claim,
                Change(
                    st.PENDING,
                    "receiver_accepted",
                    due_in=cfg.pending.poll_interval_s,
                    external_id=answer.external_id,
                    accepted=True,
                    receipt=receipt,
                    add_attempt=True,
                ),
            )
        else:  # a channel must not answer FAILED/UNKNOWN to a submit; be safe anyway
            await self._to_unknown(
                claim, cfg, "ambiguous_outcome", answer.detail, receipt, sent=True, ambiguous=True
            )

    def _send_fits(self, leased_at: float, deadline: float) -> bool:
        """Whether a send of at most ``deadline`` seconds started now ends inside a lease
        taken at ``leased_at`` (monotonic), with room left to record its answer. The
        configuration leaves ``LEASE_MARGIN_S``; a worker may lose half of it between
        taking the lease and sending (a slow commit, a busy loop), not more."""
        used = time.monotonic() - leased_at
        return used + deadline + LEASE_MARGIN_S / 2 <= self._config.lease_s

    async def _mark_sending(self, claim: Claim) -> float | None:
        """Marks the action SUBMITTING, renewing its lease by the database's clock, if the
        lease is still this worker's and has not run out. Answers the monotonic time taken
        just before (the lease lasts at least ``lease_s`` from then), or None."""
        marked_at = time.monotonic()
        marked = await self._settle(
            claim,
            Change(
                st.SUBMITTING,
                "sending",
                {"attempt": claim.attempts + 1},
                due_in=self._config.lease_s,
                keep_lease=True,
                live_lease=True,
            ),
        )
        return marked_at if marked.applied else None

    async def _mark_with_token(
        self, claim: Claim, bucket: SendBucket
    ) -> tuple[float | None, float]:
        """Waits, taking nothing, until the bucket has a token (or gives the action back to
        the queue when the wait would not fit in the lease), marks the action SUBMITTING,
        and only then takes the token: a lost lease or a long wait spends none. Answers
        (when marked, as ``_mark_sending``, or None; seconds waited)."""
        started = time.monotonic()
        while True:
            wait = await bucket.ready_in()
            if wait <= 0:
                break
            # The claim's lease must still be live when the mark renews it.
            if time.monotonic() - claim.mono + wait > self._config.lease_s - LEASE_MARGIN_S:
                await self._settle(
                    claim,
                    Change(
                        st.READY, "rate_limit_wait", {"retry_in_s": round(wait, 3)}, due_in=wait
                    ),
                )
                return None, 0.0
            await asyncio.sleep(wait)
        marked_at = await self._mark_sending(claim)
        if marked_at is None:
            return None, 0.0
        wait = await bucket.try_take()
        if wait > 0:  # another worker took this token: back to the queue, nothing sent
            await self._settle(
                claim,
                Change(st.READY, "rate_limit_wait", {"retry_in_s": round(wait, 3)}, due_in=wait),
            )
            return None, 0.0
        return marked_at, time.monotonic() - started

    async def _send_failed(
        self, claim: Claim, cfg: ChannelConfig, exc: ChannelError, attempt: int
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
        if exc.ambiguous and not cfg.safe_to_resend:
            await self._to_unknown(
                claim,
                cfg,
                "ambiguous_outcome",
                f"{exc.code}: {message}",
                receipt,
                sent=True,
                ambiguous=True,
            )
            return
        elapsed = claim.now() - (claim.first_sent_at or claim.now())
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
                    claim,
                    "rate_limited",
                    delay,
                    details,
                    failure,
                    kind,
                    receipt,
                    exc,
                    rate_limited=True,
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
                    claim, "retry_scheduled", delay, details, failure, kind, receipt, exc
                )
                return
            reason = "retries_exhausted"
        else:
            reason = "rejected"
        if exc.ambiguous or claim.ambiguous_sends:
            # An earlier (or this) send may have taken effect: "failed" would say it did
            # not, and whoever reads it would do it again another way.
            await self._to_unknown(
                claim,
                cfg,
                "outcome_uncertain",
                f"{reason} after a send whose outcome is unknown; last: {exc.code}: {message}",
                receipt,
                sent=True,
                ambiguous=exc.ambiguous,
            )
            return
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
                add_attempt=True,
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
        exc: ChannelError,
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
                due_in=delay,
                failure=failure,
                failure_kind=kind,
                receipt=receipt,
                add_attempt=True,
                add_ambiguous=exc.ambiguous,
                add_rate_limited=rate_limited,
            ),
        )

    # --- SUBMITTING whose lease ran out ----------------------------------------------------

    async def _lost_send(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        """The worker that marked this action stopped before recording an answer (it died,
        or stalled past its lease): the send may have gone out."""
        why = "the worker sending it stopped before recording the answer"
        retries = claim.attempts - claim.rate_limited  # the lost send is this many-th retry
        elapsed = claim.now() - (claim.first_sent_at or claim.now())
        if cfg.safe_to_resend and cfg.retry.should_retry(retries, elapsed, 0.0):
            self._metrics.retries.labels(claim.channel, "resend").inc()
            await self._settle(
                claim,
                Change(
                    st.READY,
                    "worker_lost_resending",
                    due_in=0.0,
                    add_attempt=True,
                    add_ambiguous=True,
                ),
            )
        elif cfg.safe_to_resend:
            await self._to_unknown(
                claim,
                cfg,
                "outcome_uncertain",
                f"{why}, and no retries are left",
                sent=True,
                ambiguous=True,
            )
        else:
            await self._to_unknown(
                claim, cfg, "worker_lost_mid_send", why, sent=True, ambiguous=True
            )

    # --- PENDING and UNKNOWN: look the outcome up -----------------------------------------

    async def _check_pending(self, claim: Claim, cfg: ChannelConfig, channel: Channel) -> None:
        now = claim.now()
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
                    due_in=cfg.pending.poll_interval_s,
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
        now = claim.now()
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
                    due_in=cfg.pending.poll_interval_s,
                    accepted=True,
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
                    due_in=delay,
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
            # Bounded like a send, so a look-up too ends inside its lease.
            async with asyncio.timeout(channel.send_deadline()[1]):
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
        if claim.attempts > 1 and claim.ambiguous_sends:
            # The look-up speaks of one send (its id, or the key the receiver may not
            # de-duplicate by); an earlier one may have taken effect all the same.
            await self._to_review(
                claim,
                "outcome_uncertain",
                f"the look-up reports a failure ({self._mask(answer.detail)}), but an "
                "earlier send may have taken effect",
                receipt,
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
        sent: bool = False,
        ambiguous: bool = False,
    ) -> None:
        """``sent``: this step made a send attempt; ``ambiguous``: whose outcome is unknown."""
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
                due_in=delay,
                failure=failure,
                failure_kind="technical",
                receipt=receipt,
                add_poll=add_poll,
                add_attempt=sent,
                add_ambiguous=ambiguous,
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
        if claim.state == st.READY and not claim.ambiguous_sends:
            failure = {
                "code": errors.CHANNEL_NOT_ALLOWED.code,
                "message": f"channel {claim.channel!r} is no longer configured",
                "data": {"final": True},
            }
            await self._settle(
                claim,
                Change(st.FAILED, "channel_removed", failure=failure, failure_kind="technical"),
            )
        else:  # it may have been sent (now, or by an earlier attempt): only a person can tell
            await self._to_review(claim, "channel_removed", "its channel is no longer configured")

    # --- writing ---------------------------------------------------------------------------

    async def _settle(self, claim: Claim, change: Change) -> Settled:
        """Settles a change, trying again while the database is away: a receiver's answer
        cannot be had again. The lease still fences it, so an answer that comes too late
        for its lease loses to whoever took the action over (``_late_success``)."""
        return await _patiently(
            f"recording a change of action {claim.action_id}",
            lambda: self._settle_once(claim, change),
        )

    async def _settle_once(self, claim: Claim, change: Change) -> Settled:
        held = self._working.get(claim.action_id)
        if held is not None and held.lease != claim.lease:
            claim = dataclasses.replace(claim, lease=held.lease)
        settled = await self._group.settle(claim, change)
        if held is not None and settled.applied:
            held.row = _row_after(held.row, change)
        if not settled.applied and change.to_state == st.SUCCEEDED:
            settled = await self._late_success(claim, change)
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

    async def _late_success(self, claim: Claim, change: Change) -> Settled:
        """The receiver confirmed the action, but this worker's lease was taken over
        meanwhile (it stalled, the database was locked or away): the new owner, knowing
        nothing, made it UNKNOWN or queued a re-send. A confirmation is the news both wait
        for, whoever brings it (``store.record_late_confirmation``). The takeover may still
        be deciding for a moment, so this asks a few times."""
        # The attempt was counted by whoever took the action over.
        late = dataclasses.replace(change, reason="late_answer_recorded", add_attempt=False)
        settled = Settled(False)
        for _ in range(LATE_ANSWER_TRIES):
            settled = await asyncio.to_thread(
                self._store.record_late_confirmation, claim.action_id, late
            )
            if settled.applied:
                break
            await asyncio.sleep(LATE_ANSWER_PAUSE_S)
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
        if self._config.routed_failure_kinds:
            asyncio.get_running_loop().create_task(self._deliver_alerts())

    async def _alert_sweeper(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and self._config.routed_failure_kinds:
            await self._deliver_alerts()
            await asyncio.sleep(ALERT_SWEEP_SECONDS)

    # --- alert baselines ---------------------------------------------------------------------

    async def _baseline_sweeper(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                now = dt.datetime.fromtimestamp(await asyncio.to_thread(self._store.clock), dt.UTC)
                await self.judge_baselines(now)
            except Exception:  # noqa: BLE001 - the database may be away; the next sweep retries
                log.exception("judging the channels against their baselines failed")
            try:
                await asyncio.wait_for(stop.wait(), BASELINE_SWEEP_SECONDS)
            except TimeoutError:
                pass

    async def judge_baselines(self, now: dt.datetime) -> list[baseline.Judgement]:
        """Judges every (tenant, channel)'s signals at ``now`` and raises an alert for each
        one past its threshold, once per channel, signal and hour whichever replica sees
        it first; returns the judgements."""
        policy = self._config.baseline
        finished, entered = await asyncio.to_thread(
            self._store.baseline_rows, baseline.history_start(now, policy)
        )
        judged = baseline.judge(now, policy, finished, entered)
        raised = 0
        for j in judged:
            if not j.alerting:
                continue
            message = (
                f"channel {j.channel}: {j.signal} {j.current:.4g} over the last hour "
                f"({j.samples} samples) is past its threshold {j.threshold:.4g} (usual "
                f"{j.mean:.4g}, deviation {j.stddev:.4g} over {j.history_days} days)"
            )
            key = f"baseline/{j.channel}/{j.signal}/{now.astimezone(dt.UTC):%Y-%m-%dT%H}"
            raised += await asyncio.to_thread(
                self._store.raise_alert_once,
                j.tenant,
                f"baseline_{j.signal}",
                j.failure_kind,
                message,
                key,
            )
        if raised:
            log.warning("%s channel signal(s) past their baseline thresholds", raised)
            self._wake_alerts()
        return judged

    # --- the dedupe archive -----------------------------------------------------------------

    async def _archive_sweeper(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.archive_expired()
            try:
                await asyncio.wait_for(stop.wait(), ARCHIVE_SWEEP_SECONDS)
            except TimeoutError:
                pass

    async def archive_expired(self) -> int:
        """Moves every finished task past ``engine.dedupe_retention_days`` (by the database's
        clock) to the dedupe archive, a batch per transaction; the number of tasks moved."""
        moved = 0
        try:
            while True:
                now = dt.datetime.fromtimestamp(await asyncio.to_thread(self._store.clock), dt.UTC)
                done = await asyncio.to_thread(
                    self._store.archive_expired, now, self._config.dedupe_retention_days
                )
                moved += done.tasks
                if done.tasks < DEDUPE_BATCH:
                    break
        except Exception:  # noqa: BLE001 - the database may be away; the next sweep retries
            log.exception("moving expired dedupe records to the archive failed")
        if moved:
            log.info("moved %s finished task(s) past the dedupe retention to the archive", moved)
        return moved

    async def _deliver_alerts(self) -> None:
        async with self._alert_lock:  # the sweeper and a fresh alert must not both send it
            await self._deliver_pending_alerts()

    async def _deliver_pending_alerts(self) -> None:
        kinds = self._config.routed_failure_kinds
        deadline = max(
            self._channels[self._config.alert_route(kind)].send_deadline()[1] for kind in kinds
        )
        for _ in range(ALERT_BATCH):
            # One at a time, each under a claim of its own, so no other worker delivers it
            # and its send fits in the claim like an action's fits in its lease.
            claimed_at = time.monotonic()
            hold = self._alert_hold_s()
            try:
                claimed = await asyncio.to_thread(
                    self._store.claim_alerts, self._worker, 1, ALERT_MAX_ATTEMPTS, hold, kinds
                )
            except Exception:  # noqa: BLE001 - retried on the next sweep
                log.exception("claiming undelivered alerts failed")
                return
            if not claimed:
                return
            alert = claimed[0]
            if time.monotonic() - claimed_at + deadline + LEASE_MARGIN_S > hold:
                return  # stalled since the claim: it runs out and the alert is taken again
            # Business failures to the business, technical ones to operations.
            channel = self._channels[self._config.alert_route(alert.failure_kind)]
            ok, error = await self._deliver_alert(channel, alert, deadline)
            # Alerts are at least once: one whose delivery may have arrived is sent again
            # all the same (with the same Idempotency-Key), since a lost alert is the silent
            # failure alerts exist to prevent.
            retry_in = min(
                ALERT_RETRY_BASE_S * 3 ** min(alert.delivery_attempts, 6), ALERT_RETRY_CAP_S
            )
            if not await self._mark_alert(alert, ok, self._mask(error), retry_in):
                return
            if not ok and alert.delivery_attempts + 1 >= ALERT_MAX_ATTEMPTS:
                log.error(
                    "alert %s of tenant %s left undelivered after %s tries: %s",
                    alert.id,
                    alert.tenant,
                    ALERT_MAX_ATTEMPTS,
                    self._mask(error),
                )
                continue
            if not ok:  # not left to the next sweep
                asyncio.get_running_loop().call_later(retry_in, self._wake_alerts)

    def _alert_hold_s(self) -> float:
        """How long a worker holds an alert it delivers: longer than a lease, since a held
        alert only waits, while one taken over from a stalled worker is sent twice."""
        return max(ALERT_HOLD_S, 4 * self._config.lease_s)

    async def _mark_alert(self, alert: Any, ok: bool, error: str, retry_in: float) -> bool:
        """Records a delivery, trying again while the database is away or locked (within
        the hold, after which another worker may deliver it again)."""
        try:
            await _patiently(
                f"recording the delivery of alert {alert.id}",
                lambda: asyncio.to_thread(self._store.mark_alert, alert, ok, error, retry_in),
            )
        except Exception:  # noqa: BLE001 - the claim runs out; delivered again later
            log.exception("recording the delivery of alert %s failed", alert.id)
            return False
        return True

    async def _deliver_alert(
        self, channel: Channel, alert: Any, deadline: float
    ) -> tuple[bool, str]:
        """Sends one alert: (delivered, why not)."""
        params: dict[str, Any] = {
            "kind": alert.kind,
            "failure_kind": alert.failure_kind,
            "tenant": alert.tenant,
            "task_id": alert.task_id,
            "action_id": alert.action_id,
            "message": alert.message,
        }
        outgoing = Outgoing(
            action_id=f"alert-{alert.id}",
            idempotency_key=(
                alert_key(alert.task_id, alert.id)
                if alert.task_id
                else once_alert_key(alert.tenant, alert.dedupe_key or str(alert.id))
            ),
            action_type="alert",
            params=params,
            trace_id=secrets.token_hex(16),
            tenant=alert.tenant,
            entity_id=alert.task_id,
        )
        try:
            async with asyncio.timeout(deadline):
                await channel.submit(outgoing)
            return True, ""
        except ChannelError as exc:
            return False, f"{exc.code}: {exc.message}"
        except TimeoutError:
            return False, f"no answer within {deadline:g} s"
        except Exception as exc:  # noqa: BLE001 - a channel bug
            return False, type(exc).__name__


class GroupCommit:
    """Settles the changes of this process's steps together: a change waits while the
    transaction before it commits, then goes with every change that came meanwhile in ONE
    transaction (``ReachStore.settle_many``), each still fenced by its own lease. A change
    alone (one client, an idle moment) is written at once, as before; under load a commit
    carries many. A batch the database refuses for a passing reason fails for each of its
    changes alike (each caller tries again, ``_patiently``); any other failure is tried
    again change by change, so that one change's trouble is its own."""

    def __init__(self, store: ReachStore, limit: int = GROUP_COMMIT_MAX) -> None:
        self._store = store
        self._limit = limit
        self._queue: list[tuple[Claim, Change, asyncio.Future[Settled]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def settle(self, claim: Claim, change: Change) -> Settled:
        future: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
        self._queue.append((claim, change, future))
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[: self._limit], self._queue[self._limit :]
                await self._write(batch)
        finally:
            self._flushing = None

    async def _write(self, batch: list[tuple[Claim, Change, asyncio.Future[Settled]]]) -> None:
        changes = [(claim, change) for claim, change, _ in batch]
        try:
            results = await asyncio.to_thread(self._store.settle_many, changes)
        except Exception as exc:  # noqa: BLE001 - handed to the callers
            if len(batch) == 1 or database_errors.is_transient(exc):
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
            for item in batch:
                await self._write([item])
            return
        for (_, _, future), settled in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(settled)


def alert_key(task_id: str, alert_id: int) -> str:
    """An alert's idempotency key (its ``webhook-id`` when signed): what a receiver
    de-duplicates by. The row number alone repeats across databases (another deployment,
    a database made anew), so a new alert would pass for a repeat and be dropped; the task
    id is random, and with the row number it names one alert anywhere."""
    return f"reachstore-alert-{task_id}-{alert_id}"


def once_alert_key(tenant: str, dedupe_key: str) -> str:
    """The idempotency key of an alert raised once by its ``dedupe_key`` (a baseline alert,
    which belongs to no task): the same cause in the same hour is the same alert on every
    replica. Hashed, since the tenant and channel names are free text."""
    digest = hashlib.sha256(f"{tenant}\x00{dedupe_key}".encode()).hexdigest()[:32]
    return f"reachstore-alert-{digest}"


def _cut_off(exc: Exception, deadline: float, what: str, started: float) -> ChannelError:
    """A submit that ended without the channel's own answer: the send deadline passed, or
    the channel failed unexpectedly. Either way the request may have gone out."""
    duration_ms = int((time.monotonic() - started) * 1000)
    if isinstance(exc, TimeoutError):
        return ChannelError(
            "timeout",
            "RECEIVER_TIMEOUT",
            f"no complete answer within the send deadline of {deadline:g} s ({what})",
            ambiguous=True,
            duration_ms=duration_ms,
        )
    return ChannelError(
        "transient",
        "RECEIVER_ERROR",
        f"the channel failed unexpectedly: {type(exc).__name__}",
        ambiguous=True,
        duration_ms=duration_ms,
    )


async def _patiently(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """Runs ``call``, again while it fails for the database's passing trouble, for up to
    ``RECORD_PATIENCE_S``; any other error, or the last one, is raised."""
    give_up = time.monotonic() + RECORD_PATIENCE_S
    pause = 0.1
    while True:
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - filtered just below
            if not database_errors.is_transient(exc) or time.monotonic() + pause > give_up:
                raise
            log.warning("%s failed (%s); trying again", what, type(exc).__name__)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


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


@dataclasses.dataclass
class _Held:
    """What this process knows of an action a step of it is under way on: the lease it
    writes under, and the row's counters as the step last left them (``_row_of``)."""

    lease: str
    row: tuple[str, int, int, int, int]


def _row_of(claim: Claim) -> tuple[str, int, int, int, int]:
    """The parts of an action's row that every change a worker makes to it moves."""
    return (
        claim.state,
        claim.attempts,
        claim.rate_limited,
        claim.unknown_polls,
        claim.ambiguous_sends,
    )


def _row_after(
    row: tuple[str, int, int, int, int], change: Change
) -> tuple[str, int, int, int, int]:
    """``row`` after ``change`` is applied, as ``store.py`` applies it."""
    _state, attempts, rate_limited, unknown_polls, ambiguous = row
    return (
        change.to_state,
        attempts + change.add_attempt,
        rate_limited + change.add_rate_limited,
        unknown_polls + change.add_unknown_poll,
        ambiguous + change.add_ambiguous,
    )
