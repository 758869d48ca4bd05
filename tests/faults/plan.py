"""What a receiver does with each request it gets, drawn reproducibly from the run's seed.

A draw depends only on (seed, channel, business intent, how many requests for that intent
came before), never on arrival order across intents, so the same seed puts the same faults
on the same intents even though two workers race to send them.

Some intents are "sticky slow": every request for them trickles past the lease, like a
receiver that is consistently slow for one kind of job. That is what shows whether a send
that outlives its lease is ever given up, or re-sent forever.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping

# name -> what the receiver does; the first five take effect, the last three do not.
RECEIVER_FAULTS = {
    "ok": "takes effect and answers 200 at once",
    "accept": "takes effect and answers 202; its status reads pending for a moment, then done",
    "late": "takes effect and answers 200 only after the client's read timeout",
    "trickle": "takes effect and trickles a 200 body for longer than the lease",
    "drop": "reads the request, takes effect and closes the connection without an answer",
    "5xx": "answers 503 without taking effect",
    "429": "answers 429 (Retry-After: 1) without taking effect",
    "4xx": "refuses the action on its merits (422) without taking effect",
}
EFFECT_FAULTS = frozenset({"ok", "accept", "late", "trickle", "drop"})
# Weights of the per-request draw (percent of requests, roughly).
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "ok": 50,
    "accept": 6,
    "late": 9,
    "trickle": 6,
    "drop": 8,
    "5xx": 11,
    "429": 5,
    "4xx": 5,
}
STICKY_SLOW_SHARE = 0.03


@dataclasses.dataclass(frozen=True)
class FaultMix:
    seed: int
    weights: Mapping[str, float] = dataclasses.field(default_factory=lambda: DEFAULT_WEIGHTS)
    sticky_slow: float = STICKY_SLOW_SHARE

    def only(self, enabled: Iterable[str]) -> FaultMix:
        """The mix with only the ``enabled`` faults (a plain 200 always stays)."""
        keep = set(enabled) | {"ok"}
        weights = {name: w for name, w in self.weights.items() if name in keep}
        sticky = self.sticky_slow if "trickle" in keep else 0.0
        return dataclasses.replace(self, weights=weights, sticky_slow=sticky)

    def sticky_slow_intent(self, channel: str, intent: str) -> bool:
        return random.Random(f"{self.seed}/{channel}/{intent}/sticky").random() < self.sticky_slow

    def draw(self, channel: str, intent: str, n: int, may_refuse: bool) -> str:
        """The fault for the ``n``-th request (0-based) of ``intent`` on ``channel``.

        ``may_refuse`` False leaves out the business refusal: a receiver that already took
        the action's effect (a replayed key, an idempotent action done before) answers as
        it did then, never "refused on the merits"."""
        if self.sticky_slow_intent(channel, intent):
            return "trickle"
        rng = random.Random(f"{self.seed}/{channel}/{intent}/{n}")
        names = [name for name in self.weights if may_refuse or name != "4xx"]
        return rng.choices(names, [self.weights[name] for name in names])[0]
