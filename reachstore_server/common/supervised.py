"""A service started by `reachstore up` stops itself once `up` is gone.

`up` starts each service in a process group of its own and names itself in
``REACHSTORE_SUPERVISOR_PID``. A service watches that process from its event loop and, once
it has exited (even killed outright, with no chance to stop anything), sends itself SIGTERM,
so it stops exactly as `up` would have stopped it. Nothing runs between fork and exec for
this (code there is unsafe once the parent has threads) and no thread is started (the
ingest service forks its embedders before any thread exists). If the clean stop hangs, an
alarm ends the process after a grace period, so nothing `up` started can outlive it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
from collections.abc import Callable, Mapping

SUPERVISOR_PID = "REACHSTORE_SUPERVISOR_PID"

# Longer than every service's own clean stop (the ingest worker's join is the longest), so
# the alarm only ends a stop that hangs.
STOP_GRACE_SECONDS = 40.0
# Where pidfds are missing (not Linux, or an old kernel), the parent is checked this often.
POLL_SECONDS = 0.5

log = logging.getLogger(__name__)


def supervisor_pid(env: Mapping[str, str]) -> int | None:
    """The supervisor's pid from ``env``, or None when the service runs on its own."""
    raw = env.get(SUPERVISOR_PID, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 1:
        raise ValueError(f"{SUPERVISOR_PID} must be a process id above 1, got {raw!r}")
    return int(raw)


def watch_supervisor(
    loop: asyncio.AbstractEventLoop,
    env: Mapping[str, str] = os.environ,
    grace_s: float = STOP_GRACE_SECONDS,
) -> None:
    """Stops this process (SIGTERM, then the alarm after ``grace_s``) when the supervisor
    named in ``env`` exits. Does nothing without one."""
    pid = supervisor_pid(env)
    if pid is None:
        return

    def gone() -> None:
        log.warning("the supervisor (pid %d) is gone: stopping", pid)
        # SIGALRM's default action ends the process: the backstop for a stop that hangs.
        signal.alarm(max(1, math.ceil(grace_s)))
        os.kill(os.getpid(), signal.SIGTERM)

    # The supervisor is this process's parent; once it dies the process is re-parented,
    # so a parent other than it means it is already gone (and its pid may be reused).
    if os.getppid() != pid:
        loop.call_soon(gone)
        return
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        loop.call_soon(gone)
        return
    except (AttributeError, OSError):
        _poll_parent(loop, pid, gone)
        return
    if os.getppid() != pid:  # it died between the check and the open
        os.close(pidfd)
        loop.call_soon(gone)
        return

    def exited() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        gone()

    # A pidfd turns readable when its process exits.
    loop.add_reader(pidfd, exited)


def _poll_parent(loop: asyncio.AbstractEventLoop, pid: int, gone: Callable[[], None]) -> None:
    def check() -> None:
        if os.getppid() != pid:
            gone()
        else:
            loop.call_later(POLL_SECONDS, check)

    loop.call_later(POLL_SECONDS, check)
