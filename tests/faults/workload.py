"""The agent's side: tasks submitted over gRPC to either worker, some of them twice.

Each task carries two actions on two different channels; each action has a business
intent of its own (the ``intent`` parameter, the channel's only idempotency parameter),
so the receivers can count effects per intent whatever key reach minted for it.

Some tasks are submitted again a few seconds later, as a caller that retries would, in
one of the ``RESUBMISSIONS`` variants. The same intent with the same (or no) logical time
must come back deduplicated; with the logical time moved to another day it must either be
refused (INVALID_ARGUMENT naming ``logical_time``: nothing is sent) or, if accepted, not
take effect a second time. (A run across midnight UTC could see an honest second key for
the variants without a logical time; runs take minutes, so this is left as a caveat.)

A submission whose answer is lost (the worker was killed, the database was down) is sent
again, identically, to any worker: reservation is idempotent, so that is always safe, and
the checker later also finds tasks whose every answer was lost by listing them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import time
from collections.abc import Sequence
from concurrent import futures

import grpc

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.e2e.test_reach_crash import action_spec, error_reason
from tests.faults.cluster import Cluster, HarnessError

# variant -> logical time of the second submission, relative to now (None: the same
# request as the first, byte for byte; "" : no logical time at all).
RESUBMISSIONS: dict[str, dt.timedelta | str | None] = {
    "same": None,
    "no_logical_time": "",
    "plus_30s": dt.timedelta(seconds=30),
    "plus_1d": dt.timedelta(days=1),
    "minus_1d": dt.timedelta(days=-1),
    "plus_3d": dt.timedelta(days=3),
}
RESUBMIT_SHARE = 0.2
RESUBMIT_AFTER_S = (1.0, 6.0)  # how long after the first submission the second comes
ACTIONS_PER_TASK = 2
# Codes after which the same submission is tried again: the answer was lost, not given.
_TRY_AGAIN = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,  # the worker went away mid-call
    }
)
_TRIES = 8
SUBMITTERS = 4


@dataclasses.dataclass
class Submission:
    task_no: int
    variant: str  # "original" or a key of RESUBMISSIONS
    request: pb.SubmitTaskRequest
    at: float = 0.0  # monotonic, when first sent
    task_id: str = ""
    action_ids: tuple[str, ...] = ()
    deduplicated: bool = False
    refused: str = ""  # code, reason and message of a refusal
    unanswered: str = ""  # the last error when every try went unanswered
    tries: int = 0
    took_s: float = 0.0  # from the first try to the answer (or giving up)

    @property
    def accepted(self) -> bool:
        return bool(self.task_id)


def _rfc3339(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


class Workload:
    def __init__(self, cluster: Cluster, seed: int, tasks: int, channels: Sequence[str]) -> None:
        self._cluster = cluster
        self._rng = random.Random(f"{seed}/workload")  # what is submitted, and when
        self._pick = random.Random(f"{seed}/pick")  # which worker (drawn by the submitters)
        self._channels = list(channels)
        self.tasks = tasks
        self.submissions: list[Submission] = []

    def _task(self, n: int) -> pb.SubmitTaskRequest:
        channels = self._rng.sample(self._channels, ACTIONS_PER_TASK)
        logical = "" if self._rng.random() < 0.5 else _rfc3339(dt.datetime.now(dt.UTC))
        return pb.SubmitTaskRequest(
            entity_id=f"order-{n}",
            logical_time=logical,
            actions=[
                action_spec(f"a{i}", channel, {"intent": f"t{n}a{i}", "note": f"task {n}"})
                for i, channel in enumerate(channels)
            ],
        )

    def _again(self, first: pb.SubmitTaskRequest, variant: str) -> pb.SubmitTaskRequest:
        request = pb.SubmitTaskRequest()
        request.CopyFrom(first)
        shift = RESUBMISSIONS[variant]
        if isinstance(shift, dt.timedelta):
            request.logical_time = _rfc3339(dt.datetime.now(dt.UTC) + shift)
        elif shift == "":
            request.logical_time = ""
        return request

    def run(self, duration_s: float) -> None:
        """Submits ``tasks`` tasks evenly over ``duration_s``, and the resubmissions a few
        seconds after their first; returns when all were sent."""
        start = time.monotonic()
        # The first submissions leave room for the last resubmissions within duration_s.
        gap = max(duration_s - RESUBMIT_AFTER_S[1], duration_s / 2) / max(self.tasks, 1)
        schedule: list[tuple[float, int, str]] = []
        for n in range(self.tasks):
            schedule.append((n * gap, n, "original"))
            if self._rng.random() < RESUBMIT_SHARE:
                variant = self._rng.choice(sorted(RESUBMISSIONS))
                schedule.append((n * gap + self._rng.uniform(*RESUBMIT_AFTER_S), n, variant))
        schedule.sort()
        firsts: dict[int, pb.SubmitTaskRequest] = {}
        # Callers submit concurrently, as agents do: one slow answer (a worker killed under
        # it) does not hold the others back.
        with futures.ThreadPoolExecutor(SUBMITTERS) as pool:
            sent = []
            for offset, n, variant in schedule:
                delay = start + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if variant == "original":
                    request = firsts[n] = self._task(n)
                else:
                    request = self._again(firsts[n], variant)
                sent.append(pool.submit(self._submit, Submission(n, variant, request)))
            self.submissions = [f.result() for f in sent]

    def _submit(self, submission: Submission) -> Submission:
        submission.at = time.monotonic()
        try:
            return self._try(submission)
        finally:
            submission.took_s = time.monotonic() - submission.at

    def _try(self, submission: Submission) -> Submission:
        for _ in range(_TRIES):
            submission.tries += 1
            try:
                stub = self._pick.choice(self._cluster.available()).stub
            except (IndexError, AttributeError):  # both workers down this instant
                time.sleep(0.5)
                continue
            try:
                reply = stub.SubmitTask(submission.request, timeout=5)
            except ValueError:  # its channel was closed: the worker was killed meanwhile
                continue
            except grpc.RpcError as exc:
                if exc.code() in _TRY_AGAIN:
                    submission.unanswered = f"{exc.code().name}: {exc.details()}"
                    time.sleep(0.3)
                    continue
                submission.refused = _refusal(exc)
                submission.unanswered = ""
                return submission
            submission.task_id = reply.task.task_id
            submission.action_ids = tuple(a.action_id for a in reply.task.actions)
            submission.deduplicated = reply.deduplicated
            submission.unanswered = ""
            return submission
        return submission


def _refusal(exc: grpc.RpcError) -> str:
    try:
        reason, _ = error_reason(exc)
    except AssertionError:  # no rich status attached
        reason = ""
    return f"{exc.code().name} {reason}: {exc.details()}"


def check_started(submissions: Sequence[Submission]) -> None:
    """A run where nothing was accepted tells nothing about reach."""
    if submissions and not any(s.accepted for s in submissions):
        first = submissions[0]
        raise HarnessError(
            f"no submission was accepted; the first: {first.refused or first.unanswered}"
        )
