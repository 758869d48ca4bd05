"""The properties: what must hold between the receivers' logs, the API and the nemesis log.

Each check reads an ``Observation`` and yields ``Violation``s. Where a fault can honestly
defeat a property (a worker killed right after the receiver answered cannot record the
answer), the nemesis log excuses exactly the requests its victim sent inside the fault's
window (the receivers log which worker's connection carried each request), and no others;
the windows are named in each check.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence

from reachstore.reach.v1 import reach_service_pb2 as pb
from tests.faults.config import Profile, Timing
from tests.faults.nemesis import DISRUPTIONS, Event
from tests.faults.receivers import AlertDelivery, Request
from tests.faults.snapshot import STUCK, ActionView
from tests.faults.workload import Submission

PROPERTIES = {
    "lost": "every accepted action, and every action a receiver heard of, reads back",
    "stuck": "after the drain no action is left blocked, ready, submitting or pending",
    "twice": "an action took effect at most once, unless it is idempotent and its receiver "
    "does not de-duplicate (re-sending it is then harmless by declaration)",
    "twice_per_intent": "a business intent on a non-idempotent channel took effect at most "
    "once across all its submissions (another logical time must not mint another effect)",
    "succeeded_without_effect": "succeeded only with a receipt saying so and an effect at "
    "the receiver",
    "failed_after_effect": "failed only if no request for it took effect at the receiver",
    "failed_after_ambiguous_send": "never failed after a send whose outcome was unknown "
    "(a timeout, a lost connection, a worker lost mid-send)",
    "failed_without_refusal": "failed only with a receipt showing the receiver refused it",
    "confirmed_but_failed": "an action the receiver confirmed (an effect and a full 2xx "
    "answer the client read) is succeeded or awaiting review, never failed",
    "receipt_thrown_away": "a confirmation that reached its worker undisturbed (within the "
    "send deadline; that worker not killed or paused, the database up and, on SQLite, no "
    "worker frozen, from the request until 5 s after) ends succeeded",
    "too_many_posts": "POSTs per action stay within its retry budget (first + retries + "
    "rate-limited retries + one re-send), plus one per kill or pause of its senders meanwhile",
    "concurrent_sends": "never two requests for one action in flight at once from the "
    "senders' side (a sender has hung up by its send deadline), unless the first one's "
    "sender was killed or paused meanwhile or the second's was just thawed",
    "alert_twice": "each alert arrives once, unless its sender did not hear it succeed, or "
    "the worker that delivered it was killed or paused, or the database restarted, before "
    "the next delivery",
}
# Windows that excuse, around a request: from 0.2 s before it to this long after it
# (the worker needs a moment to record what it heard; on a 2-core machine running other
# tests beside the checker, a worker was seen to need more than 2 s).
RECORD_S = 5.0
# A request this soon after a SIGCONT may come from a worker that was frozen before it
# sent and could not know its lease had gone.
THAWED_S = 1.5
# How late a busy worker may notice its send deadline.
SENDER_SLACK_S = 0.5
WORKER_FAULTS = frozenset({"kill", "pause"})
# Send errors after which the request may have taken effect (a refused connection, say,
# is not one: nothing was sent).
AMBIGUOUS_CODES = frozenset({"RECEIVER_TIMEOUT", "RECEIVER_CONNECTION_LOST", "RECEIVER_ERROR"})
DID_NOT_HAPPEN = frozenset({"failed", "cancelled", "skipped"})
AWAITING_A_PERSON = frozenset({"unknown", "needs_review"})


@dataclasses.dataclass(frozen=True)
class Violation:
    prop: str
    subject: str  # an action id, an intent or an alert id
    why: str
    actions: tuple[str, ...] = ()  # the action(s) concerned, for the details


@dataclasses.dataclass
class Observation:
    seed: int
    t0: float
    timing: Timing
    profiles: Mapping[str, Profile]
    submissions: Sequence[Submission]
    actions: Mapping[str, ActionView]
    missing: set[str]
    requests: Sequence[Request]
    alerts: Sequence[AlertDelivery]
    events: Sequence[Event]
    # SQLite: one writer at a time, so a worker frozen inside a write transaction holds
    # the database from every other worker, as a database restart would.
    one_writer: bool = False

    def __post_init__(self) -> None:
        by_action: dict[str, list[Request]] = collections.defaultdict(list)
        for request in sorted(self.requests, key=lambda r: r.start):
            by_action[request.action_id].append(request)
        self.by_action: Mapping[str, list[Request]] = by_action

    def requests_of(self, action_id: str) -> list[Request]:
        return self.by_action.get(action_id, [])

    def hurt(
        self,
        sender: str,
        low: float,
        high: float,
        kinds: frozenset[str] = DISRUPTIONS,
        *,
        writes: bool = True,
    ) -> bool:
        """Whether, within [low, high], the worker ``sender`` was killed or paused or the
        database was down (``kinds`` may narrow that). An unknown sender ("") is taken to
        be any worker. ``writes``: the worker needed to write then, so on SQLite any
        frozen worker (holding the one write lock) hurt it too."""
        return any(
            e.kind in kinds
            and e.overlaps(low, high)
            and (
                e.kind == "db_restart"
                or (writes and self.one_writer and e.kind == "pause")
                or not sender
                or e.target == sender
            )
            for e in self.events
        )


Check = Callable[[Observation], Iterator[Violation]]


def lost(obs: Observation) -> Iterator[Violation]:
    for s in obs.submissions:
        for action_id in s.action_ids:
            if action_id not in obs.actions:
                yield Violation("lost", action_id, f"accepted in task {s.task_id}, not readable")
    for action_id in sorted(set(obs.by_action) - set(obs.actions)):
        yield Violation("lost", action_id, "a receiver got it; the API does not know it")


def stuck(obs: Observation) -> Iterator[Violation]:
    for a in obs.actions.values():
        if a.state in STUCK:
            yield Violation("stuck", a.action_id, f"still {a.state}", (a.action_id,))


def twice(obs: Observation) -> Iterator[Violation]:
    for a in obs.actions.values():
        profile = obs.profiles[a.channel]
        if profile.idempotent and not profile.dedupe:
            continue
        effects = sum(r.new_effect for r in obs.requests_of(a.action_id))
        if effects > 1:
            yield Violation("twice", a.action_id, f"{effects} effects", (a.action_id,))


def twice_per_intent(obs: Observation) -> Iterator[Violation]:
    effects: dict[tuple[str, str], list[Request]] = collections.defaultdict(list)
    for r in obs.requests:
        if r.new_effect and not obs.profiles[r.channel].idempotent:
            effects[(r.channel, r.intent)].append(r)
    for (channel, intent), made in sorted(effects.items()):
        actions = tuple(sorted({r.action_id for r in made}))
        if len(actions) > 1:
            yield Violation(
                "twice_per_intent",
                intent,
                f"{len(made)} effects on {channel} from {len(actions)} actions (keys "
                f"{', '.join(sorted({str(r.key) for r in made}))})",
                actions,
            )


def succeeded_without_effect(obs: Observation) -> Iterator[Violation]:
    for a in obs.actions.values():
        if a.state != "succeeded":
            continue
        if not any(r.outcome == "succeeded" for r in a.receipts):
            why = "no receipt says it succeeded"
        elif not any(r.effective for r in obs.requests_of(a.action_id)):
            why = "the receiver has no effect for it"
        else:
            continue
        yield Violation("succeeded_without_effect", a.action_id, why, (a.action_id,))


def failed(obs: Observation) -> Iterator[Violation]:
    """The three ways a ``failed`` can be dishonest, each its own property."""
    for a in obs.actions.values():
        if a.state != "failed":
            continue
        requests = obs.requests_of(a.action_id)
        took = [r for r in requests if r.effective]
        if took:
            yield Violation(
                "failed_after_effect",
                a.action_id,
                f"{len(took)} of its {len(requests)} request(s) took effect",
                (a.action_id,),
            )
        ambiguous = [
            f"{entry.reason} ({_code(entry)})" if _code(entry) else entry.reason
            for entry in a.history
            if _code(entry) in AMBIGUOUS_CODES
            or entry.reason == "ambiguous_outcome"
            or entry.reason.startswith("worker_lost")
        ]
        if ambiguous:
            yield Violation(
                "failed_after_ambiguous_send", a.action_id, "; ".join(ambiguous), (a.action_id,)
            )
        submits = [r for r in a.receipts if r.operation == "submit"]
        if not submits or submits[-1].status_code < 400:
            last = f"status {submits[-1].status_code}" if submits else "no submit receipt"
            yield Violation(
                "failed_without_refusal", a.action_id, f"its last receipt: {last}", (a.action_id,)
            )


def _code(entry: pb.HistoryEntry) -> str:
    """The error code a history entry's details name ("" for none)."""
    code = entry.details.fields.get("code")
    return code.string_value if code is not None else ""


def confirmed(obs: Observation) -> Iterator[Violation]:
    """A confirmation must never turn into ``failed``; one that reached a worker while
    nothing disturbed it must turn into ``succeeded``."""
    for a in obs.actions.values():
        heard = [r for r in obs.requests_of(a.action_id) if r.confirmed]
        if not heard:
            continue
        if a.state in DID_NOT_HAPPEN:
            yield Violation(
                "confirmed_but_failed",
                a.action_id,
                f"{a.state} although {len(heard)} request(s) were confirmed",
                (a.action_id,),
            )
        # Only answers inside the send deadline reach the worker: past it the worker has
        # given up on the send (an answer the receiver wrote then may still be in flight).
        calm = [
            r
            for r in heard
            if r.end - r.start <= obs.timing.send_deadline_s
            and not obs.hurt(r.sender, r.start - 0.2, r.end + RECORD_S)
        ]
        if a.state in AWAITING_A_PERSON and calm:
            yield Violation(
                "receipt_thrown_away",
                a.action_id,
                f"{a.state} ({', '.join(a.reasons()[1:])}) although the receiver confirmed "
                f"it {len(calm)} time(s) while its worker and the database were undisturbed",
                (a.action_id,),
            )


def posts(obs: Observation) -> Iterator[Violation]:
    for a in obs.actions.values():
        requests = obs.requests_of(a.action_id)
        if not requests:
            continue
        low, high = requests[0].start, max(r.end for r in requests)
        senders = {r.sender for r in requests}
        hits = sum(
            e.kind in WORKER_FAULTS
            and e.overlaps(low, high)
            and ("" in senders or e.target in senders)
            for e in obs.events
        )
        bound = obs.timing.post_bound + hits
        if len(requests) > bound:
            yield Violation(
                "too_many_posts",
                a.action_id,
                f"{len(requests)} POSTs, bound {bound} ({hits} kill/pause during them)",
                (a.action_id,),
            )
        overlaps = [
            (first, second)
            for i, first in enumerate(requests)
            for second in requests[i + 1 :]
            if second.start < _sender_end(obs, first) and not _excused_overlap(obs, first, second)
        ]
        if overlaps:
            first, second = overlaps[0]
            yield Violation(
                "concurrent_sends",
                a.action_id,
                f"{len(overlaps)} overlapping pair(s); e.g. one sent "
                f"{second.start - first.start:.2f} s after another that was still in flight",
                (a.action_id,),
            )


def _sender_end(obs: Observation, request: Request) -> float:
    """When the sender was done with ``request``: when the receiver finished it, or, for an
    answer the sender never read, at the latest its send deadline (plus a moment for a
    busy worker): past that the sender has hung up, whatever the receiver still does."""
    if request.delivered:
        return request.end
    return min(request.end, request.start + obs.timing.send_deadline_s + SENDER_SLACK_S)


def _excused_overlap(obs: Observation, first: Request, second: Request) -> bool:
    """The first's sender was killed or frozen while it waited (it cannot have given up in
    time), or the second's sender was just thawed (it may have been frozen before sending,
    unable to know its lease had gone)."""
    # A send in flight needs no database: a frozen SQLite writer excuses nothing here.
    if obs.hurt(first.sender, first.start, first.end, WORKER_FAULTS, writes=False):
        return True
    return any(
        e.kind == "pause"
        and (not second.sender or e.target == second.sender)
        and second.start - THAWED_S <= e.end <= second.start
        for e in obs.events
    )


def alert_twice(obs: Observation) -> Iterator[Violation]:
    by_id: dict[str, list[AlertDelivery]] = collections.defaultdict(list)
    for d in sorted(obs.alerts, key=lambda d: d.start):
        by_id[d.alert_id].append(d)
    for alert_id, deliveries in sorted(by_id.items()):
        pairs = zip(deliveries, deliveries[1:], strict=False)
        unexcused = [
            (a, b)
            for a, b in pairs
            if _alert_heard(obs, a) and not obs.hurt(a.sender, a.start, b.start)
        ]
        if unexcused:
            a, b = unexcused[0]
            action = a.body.get("action_id", "") if isinstance(a.body, dict) else ""
            yield Violation(
                "alert_twice",
                alert_id,
                f"delivered {len(deliveries)} times; by {a.sender or '?'} at "
                f"{a.start - obs.t0:.2f} s and by {b.sender or '?'} at {b.start - obs.t0:.2f} s, "
                f"nothing disturbed between (alert {a.body})",
                (action,) if action else (),
            )


def _alert_heard(obs: Observation, delivery: AlertDelivery) -> bool:
    """Whether the sender heard this delivery succeed: answered inside its send deadline.
    Alerts are at least once: after a delivery the sender did not hear succeed, it sends
    the alert again (docs/AT_MOST_ONCE.md, section 5)."""
    return delivery.answered and delivery.end - delivery.start <= obs.timing.send_deadline_s


CHECKS: tuple[Check, ...] = (
    lost,
    stuck,
    twice,
    twice_per_intent,
    succeeded_without_effect,
    failed,
    confirmed,
    posts,
    alert_twice,
)


def check_all(obs: Observation) -> list[Violation]:
    return [v for check in CHECKS for v in check(obs)]
