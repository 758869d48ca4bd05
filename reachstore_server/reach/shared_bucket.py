"""A channel's token bucket shared by every reach worker, kept in the database.

A provider's quota is for all of reachstore, however many workers send: with per-process
buckets, N workers would send at N times the channel's rate. Here the bucket is one row
per channel; a reservation reads it, refills it by the time passed (by the database's
clock, the one clock the workers share, unless a test gives another) and writes it back
with a compare-and-set on its version, trying again when another worker got there first.
The arithmetic is ``bucket.take``'s, so both kinds behave alike: a token is taken only
when the send goes ahead, and a waiter holds none.

Each reservation costs one short transaction (about a millisecond on PostgreSQL), small
next to a send. When the database does not answer, the worker falls back to a bucket of
its own at the same rate for that reservation, so a database outage does not stop sends
that are already claimed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.common import database_errors
from reachstore_server.reach.config import ReachConfig
from reachstore_server.reach.policy.bucket import TokenBucket, take, wait_for_token
from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.reach_models import ReachChannelBucketRow

log = logging.getLogger(__name__)

# Compare-and-set attempts per reservation before advising the caller to come back later.
_ATTEMPTS = 20


class SharedTokenBucket:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        channel: str,
        rate_per_s: float,
        burst: float = 1.0,
        clock: Callable[[], float] | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        # The local bucket checks the arguments and stands in while the database is away.
        self._local = TokenBucket(rate_per_s, burst, clock or time.time, sleep=sleep)
        self.rate_per_s, self.burst = self._local.rate_per_s, self._local.burst
        self._sessions = sessions
        self._channel = channel
        self._clock, self._sleep = clock, sleep
        self._wait_clock = clock or time.time  # only measures how long acquire waited

    def reserve(self) -> float:
        """Takes one token from the shared row and answers 0.0, or answers the seconds
        until there will be one and takes nothing."""
        for _ in range(_ATTEMPTS):
            with self._sessions.begin() as session:
                row = session.get(ReachChannelBucketRow, self._channel)
                now = self._now(session)
                if row is None:
                    if self._create(session, now):
                        return 0.0
                    continue
                tokens, stamp, wait = take(row.tokens, row.stamp, now, self.rate_per_s, self.burst)
                changed = session.execute(
                    update(ReachChannelBucketRow)
                    .where(
                        ReachChannelBucketRow.channel == self._channel,
                        ReachChannelBucketRow.version == row.version,
                    )
                    .values(tokens=tokens, stamp=stamp, version=row.version + 1)
                    .execution_options(synchronize_session=False)
                )
                if changed.rowcount == 1:  # type: ignore[attr-defined]
                    return wait
        return 1.0 / self.rate_per_s  # heavy contention: come back after one token's time

    def _now(self, session: Session) -> float:
        return self._clock() if self._clock is not None else db_clock(session)

    def ready_in_now(self) -> float:
        """Seconds until the shared row will hold a token; takes nothing."""
        with self._sessions() as session:
            row = session.get(ReachChannelBucketRow, self._channel)
            if row is None:
                return 0.0
            return take(row.tokens, row.stamp, self._now(session), self.rate_per_s, self.burst)[2]

    def _create(self, session: Session, now: float) -> bool:
        """Creates the channel's row, full, and takes the first token from it; False when
        another worker created it first."""
        try:
            with session.begin_nested():
                session.add(
                    ReachChannelBucketRow(
                        channel=self._channel, tokens=self.burst - 1.0, stamp=now, version=0
                    )
                )
        except IntegrityError:
            return False
        return True

    async def _reserve(self) -> float:
        return await self._shared(self.reserve, self._local.reserve)

    async def _shared(self, ask: Callable[[], float], instead: Callable[[], float]) -> float:
        try:
            return await asyncio.to_thread(ask)
        except Exception as exc:  # noqa: BLE001 - filtered just below
            if not database_errors.is_transient(exc):
                raise
            log.warning(
                "channel %s: shared rate bucket unavailable (%s); this worker paces itself",
                self._channel,
                type(exc).__name__,
            )
            return instead()

    async def ready_in(self) -> float:
        return await self._shared(self.ready_in_now, self._local.wait_time)

    async def try_take(self) -> float:
        return await self._reserve()

    async def acquire(self) -> float:
        """Waits until a token can be taken, takes it, and answers the seconds waited."""
        return await wait_for_token(self._reserve, self._wait_clock, self._sleep)


def shared_buckets(
    sessions: sessionmaker[Session], config: ReachConfig
) -> dict[str, SharedTokenBucket]:
    """A shared bucket for each channel with a declared quota."""
    return {
        name: SharedTokenBucket(sessions, name, cfg.send_rate_per_second)
        for name, cfg in config.channels.items()
        if cfg.send_rate_per_second
    }
