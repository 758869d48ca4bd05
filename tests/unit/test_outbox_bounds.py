"""What the outbox stores of an event: bounded, masked, and something the audit service
takes, whatever the request held."""

from __future__ import annotations

import json

from reachstore_server.audit_client import outbox
from reachstore_server.audit_client.shipper import event_message
from reachstore_server.common.pii import Masker

MASKER = Masker(b"outbox-bounds-test-secret")


def _event(params: object) -> dict[str, object]:
    draft = outbox.Draft("acme", "k1", "ingest", "BatchCreateDocuments", {}, "")
    fields = draft.event("INVALID_ARGUMENT", "INVALID_ARGUMENT", "permanent")
    fields["params"] = params
    return fields


def test_maps_and_lists_keep_their_first_entries_and_say_how_many_more() -> None:
    params = outbox.summarise(
        {"metadata": {f"k{i:06d}": "v" for i in range(450_000)}, "ids": list(range(250))},
        MASKER,
    )
    assert len(params["metadata"]) == outbox.MAX_ITEMS + 1
    assert params["metadata"]["more_keys"] == 450_000 - outbox.MAX_ITEMS
    assert params["ids"][-1] == {"more_items": 150} and len(params["ids"]) == 101


def test_long_keys_deep_nesting_and_long_texts_are_cut() -> None:
    deep: dict[str, object] = {"leaf": 1}
    for _ in range(20):
        deep = {"n": deep}
    params = outbox.summarise({"k" * 5000: "x" * 600, "deep": deep}, MASKER)
    [long_key] = [k for k in params if k.startswith("k")]
    assert len(long_key) <= outbox.MAX_KEY and "sha256:" in long_key
    assert params[long_key]["chars"] == 600
    assert "depth_cut" in json.dumps(params["deep"])


def test_nul_and_lone_surrogates_never_reach_the_outbox() -> None:
    stored = outbox.bounded_event(_event({"note": "a\x00b", "k\x00": "\ud800"}))
    assert "\x00" not in stored and "\\u0000" not in stored
    event = json.loads(stored)
    assert event["params"] == {"note": "a\ufffdb", "k\ufffd": "\ufffd"}
    event_message(event).SerializeToString()  # the shipper can send it


def test_an_event_too_large_keeps_a_digest_of_its_parameters() -> None:
    wide = {f"k{i}": "x" * 500 for i in range(100)}
    params = outbox.summarise({f"d{j}": wide for j in range(8)}, MASKER)
    stored = outbox.bounded_event(_event(params))
    assert len(stored.encode()) < outbox.MAX_EVENT_BYTES
    assert set(json.loads(stored)["params"]) == {"params_cut"}
