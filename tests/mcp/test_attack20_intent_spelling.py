"""The same intent spelled differently must stay one action (passes: pins cases no other
test covers).

An agent that repeats a call does not repeat it byte for byte: the model reorders the keys
of ``params``, names the channel's only ``action_type`` where it left it out before, or
writes "é" decomposed (NFD) where it wrote it composed (NFC) — the same text to a person
and to the receiver. Each repetition must come back as the first call's action, and the
receiver must see one delivery.
"""

from __future__ import annotations

import asyncio
import time
import unicodedata
from typing import Any

import pytest

from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import connect
from tests.reach.peers import HttpReceiver

pytestmark = pytest.mark.e2e


def test_reordered_explicit_and_decomposed_spellings_of_one_intent_send_once(
    system: RunningSystem, mcp_url: str, keys: dict[str, str], receiver: HttpReceiver
) -> None:
    ticket = unicodedata.normalize("NFC", f"Café-{time.monotonic_ns()}")
    entity = unicodedata.normalize("NFC", f"commande-{ticket}")
    first = {"entity_id": entity, "params": {"ticket": ticket, "note": "été"}}
    spellings: list[dict[str, Any]] = [
        {"params": {"note": "été", "ticket": ticket}, "entity_id": entity},
        {**first, "action_type": "open"},
        {
            "entity_id": unicodedata.normalize("NFD", entity),
            "params": {
                "ticket": unicodedata.normalize("NFD", ticket),
                "note": unicodedata.normalize("NFD", "été"),
            },
        },
    ]

    async def send() -> list[Any]:
        async with connect("http", system, mcp_url, keys["agent"]) as client:
            results = [await client.call_tool("send_hook", {**first, "wait_ms": 10_000})]
            for arguments in spellings:
                results.append(await client.call_tool("send_hook", arguments))
            return results

    results = asyncio.run(send())
    assert all(r.is_error is False for r in results), [r.content[0].text for r in results]
    contents = [r.structured_content for r in results]
    assert {c["action_id"] for c in contents} == {contents[0]["action_id"]}
    assert [c["deduplicated"] for c in contents] == [False, True, True, True]
    # Reordering and the default action type make the very same derived key.
    assert contents[1]["request_key"] == contents[2]["request_key"] == contents[0]["request_key"]
    deliveries = receiver.deliveries_by_field("ticket")
    assert (deliveries[ticket], deliveries[unicodedata.normalize("NFD", ticket)]) == (1, 0)
