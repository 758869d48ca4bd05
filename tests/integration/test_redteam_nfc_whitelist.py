"""Red team: "the same text typed two ways is one action" does not hold for the names of
whitelisted parameters, so one intent reserves two actions (two sends).

docs/AT_MOST_ONCE.md §4: "String parameters (and their keys) and the entity id are put in
Unicode NFC before the digest, so the same text typed two ways is one action." With
``idempotency_params`` set, ``params_digest`` looks each whitelisted path up by its raw
name (``_lookup``: ``part not in value``) before anything is normalised: a parameter
whose name arrives decomposed (NFD: "a" + U+0308, as macOS file names and some
keyboards/IMEs produce it) is not found, is left out of the digest, and the key differs
from the one of the same request typed in NFC. The receiver, which reads the body, gets
the same order twice.

Planned and reserved on a real store (SQLite and PostgreSQL), as ``SubmitTask`` does.
"""

from __future__ import annotations

import datetime as dt
import unicodedata

from reachstore_server.common.auth import Caller
from reachstore_server.reach.channels import build_channel
from reachstore_server.reach.config import parse_config
from reachstore_server.reach.idempotency import KeySecrets
from reachstore_server.reach.planning import ActionSpec, TaskSpec, plan_task
from reachstore_server.reach.store import ReachStore

CALLER = Caller("acme", "k1", frozenset({"reach"}))
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
RECIPIENT = unicodedata.normalize("NFC", "empfänger")  # the config names it in NFC
CONFIG = {
    "channels": {
        "hook": {
            "kind": "webhook",
            "description": "d",
            "action_types": ["deliver"],
            "idempotency_params": [RECIPIENT, "menge"],
            "webhook": {"url": "http://127.0.0.1:9/hook"},
        }
    }
}


def _reserve(store: ReachStore, params: dict[str, object]):  # type: ignore[no-untyped-def]
    config = parse_config(CONFIG)
    channels = {
        name: build_channel(cfg.kind, cfg.options, name, {})
        for name, cfg in config.channels.items()
    }
    spec = TaskSpec(
        "order-1", "", "", "", (ActionSpec("deliver", "hook", "deliver", params, (), True),)
    )
    secrets = KeySecrets(b"nfc-test-key-secret-00001")
    return store.reserve(plan_task(spec, CALLER, config, channels, "", NOW, key_secrets=secrets))


def test_a_whitelisted_parameter_name_typed_two_ways_is_one_action(store: ReachStore) -> None:
    nfc = _reserve(store, {RECIPIENT: "Frau Müller", "menge": 3})
    nfd = _reserve(store, {unicodedata.normalize("NFD", RECIPIENT): "Frau Müller", "menge": 3})

    keys = [nfc.actions[0].idem_key, nfd.actions[0].idem_key]
    assert nfd.deduplicated and keys[0] == keys[1], f"one intent, two actions: keys {keys}"


def test_two_different_recipients_are_two_actions(store: ReachStore) -> None:
    """The other side of the same bug: with the name typed in NFD, the recipient is left
    out of the digest, so two different recipients collapse into one action and the
    second delivery is silently deduplicated away."""
    nfd = unicodedata.normalize("NFD", RECIPIENT)
    _reserve(store, {nfd: "Frau Müller", "menge": 3})
    two = _reserve(store, {nfd: "Herr Schmidt", "menge": 3})

    assert not two.deduplicated, "a different recipient was taken for the same action"
