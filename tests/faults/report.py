"""The checker's printout: counts always, and the evidence for each violation.

Counts: actions per final state (overall and per channel), submissions and what became of
the resubmissions, POSTs, effects and confirmations, faults drawn by the receivers and
injected by the nemesis, alerts. Each violation found is listed under its property with
the seed, the action's history and receipts, every request the receiver logged for it,
and the nemesis events during its life, so it can be read without re-running.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence

from tests.faults.properties import PROPERTIES, Observation, Violation

# Violations shown in full per property (all are counted).
DETAILS_PER_PROPERTY = 3


def tally(values: Iterable[object]) -> str:
    counts = collections.Counter(str(v) for v in values)
    return " ".join(f"{k}={n}" for k, n in sorted(counts.items())) or "-"


@dataclasses.dataclass
class Report:
    title: str
    obs: Observation
    violations: Sequence[Violation]
    notes: Sequence[str] = ()

    @property
    def broken(self) -> list[str]:
        return sorted({v.prop for v in self.violations})

    def counts(self) -> str:
        obs = self.obs
        originals = [s for s in obs.submissions if s.variant == "original"]
        again = [s for s in obs.submissions if s.variant != "original"]
        requests = obs.requests
        lines = [
            self.title,
            f"seed {obs.seed}",
            f"submissions: {len(originals)} tasks "
            f"({sum(s.accepted for s in originals)} accepted, "
            f"{sum(bool(s.refused) for s in originals)} refused, "
            f"{sum(bool(s.unanswered) for s in originals)} never answered); "
            f"{len(again)} resubmitted: "
            + tally(
                f"{s.variant}:"
                + (
                    "deduplicated"
                    if s.deduplicated
                    else "new_task"
                    if s.accepted
                    else "refused"
                    if s.refused
                    else "unanswered"
                )
                for s in again
            ),
            f"actions: {len(obs.actions)}; final states: "
            + tally(a.state for a in obs.actions.values()),
        ]
        for name in obs.profiles:
            mine = [a for a in obs.actions.values() if a.channel == name]
            lines.append(f"  {name:20} {len(mine):5}  " + tally(a.state for a in mine))
        lines += [
            f"receivers: {len(requests)} POSTs, {sum(r.new_effect for r in requests)} effects, "
            f"{sum(r.replay for r in requests)} replays of a key, "
            f"{sum(r.confirmed for r in requests)} confirmed",
            "receiver faults drawn: " + tally(r.fault for r in requests),
            "nemesis: " + tally(e.kind for e in obs.events),
            f"alerts: {len(obs.alerts)} deliveries of "
            f"{len({d.alert_id for d in obs.alerts})} alerts",
            *self.notes,
            f"violations: {len(self.violations)}"
            + (f" ({tally(v.prop for v in self.violations)})" if self.violations else ""),
        ]
        skewed = [v for v in self.violations if self._during_skew(v)]
        if skewed:
            lines.append(
                "  of which on actions sent while a worker's clock was skewed: "
                + tally(v.prop for v in skewed)
            )
        return "\n".join(lines)

    def _during_skew(self, v: Violation) -> bool:
        skews = [e for e in self.obs.events if e.kind == "skew"]
        return any(
            e.overlaps(r.start, r.end)
            for action_id in v.actions
            for r in self.obs.requests_of(action_id)
            for e in skews
        )

    def details(self) -> str:
        obs = self.obs
        lines: list[str] = []
        by_prop: dict[str, list[Violation]] = collections.defaultdict(list)
        for v in self.violations:
            by_prop[v.prop].append(v)
        for prop, found in sorted(by_prop.items()):
            lines.append(f"\n=== {prop} ({len(found)}): {PROPERTIES[prop]}")
            for v in found[:DETAILS_PER_PROPERTY]:
                lines.append(f"- seed {obs.seed}: {v.subject}: {v.why}")
                for action_id in v.actions:
                    lines += self._evidence(action_id)
            if len(found) > DETAILS_PER_PROPERTY:
                lines.append(f"  ... and {len(found) - DETAILS_PER_PROPERTY} more")
        return "\n".join(lines)

    def _evidence(self, action_id: str) -> list[str]:
        obs = self.obs
        view = obs.actions.get(action_id)
        lines = ["    " + line for line in (view.describe() if view else [action_id])]
        requests = obs.requests_of(action_id)
        lines += ["    receiver: " + r.describe(obs.t0) for r in requests]
        if requests:
            low, high = requests[0].start - 5, max(r.end for r in requests) + 5
            lines += [
                "    nemesis: " + e.describe(obs.t0) for e in obs.events if e.overlaps(low, high)
            ]
        return lines

    def summary(self) -> str:
        return self.counts() + ("\n" + self.details() if self.violations else "")
