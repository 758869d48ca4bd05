"""The hash an appender links under the head's lock (``chain.new_event`` + ``chain.link``)
is the hash Verify recomputes (``chain.event_hash``), for any stored values; and canonical
JSON is ``json.dumps`` with its settings, whichever encoder makes it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reachstore_server.audit.chain import (
    GENESIS,
    HASHED_FIELDS,
    STORED_FIELDS,
    UNHASHABLE,
    event_hash,
    link,
    new_event,
    values_hash,
)
from reachstore_server.common.canonical import canonical_json

_TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30)


@settings(max_examples=500, deadline=None)
@given(
    values=st.fixed_dictionaries(
        {field: _TEXT for field in STORED_FIELDS if field != "duration_ms"}
        | {"duration_ms": st.integers(0, 2**63 - 1)}
    ),
    prev=st.one_of(
        st.just(GENESIS), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
    ),
)
def test_the_hash_linked_under_the_lock_is_the_hash_verify_recomputes(
    values: dict[str, Any], prev: str
) -> None:
    event = new_event(tuple(values[field] for field in STORED_FIELDS))
    assert event.around_prev is not None  # text and an integer duration: the fast path
    assert link(event, prev) == event_hash({**values, "prev_hash": prev})


def test_values_that_are_not_text_are_hashed_as_canonical_json_does() -> None:
    """A NULL (None) or a duration written as text takes the slow path, with the same
    result ``event_hash`` gives."""
    base = {field: f"v-{field}" for field in HASHED_FIELDS} | {"duration_ms": 5}
    for changed in ({"caller_key_id": None}, {"duration_ms": "5"}, {"duration_ms": True}):
        values = {**base, **changed}
        event = new_event(tuple(values[field] for field in STORED_FIELDS))
        assert event.around_prev is None
        assert link(event, GENESIS) == event_hash({**values, "prev_hash": GENESIS})


def test_a_changed_value_or_previous_hash_changes_the_link() -> None:
    values = {field: f"v-{field}" for field in STORED_FIELDS} | {"duration_ms": 5}
    event = new_event(tuple(values[field] for field in STORED_FIELDS))
    digest = link(event, GENESIS)
    assert link(event, "1" * 64) != digest
    for field in STORED_FIELDS:
        other = {**values, field: 6 if field == "duration_ms" else values[field] + "x"}
        assert link(new_event(tuple(other[f] for f in STORED_FIELDS)), GENESIS) != digest


_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        _TEXT,
    ),  # fmt: skip
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=15,
)


@settings(max_examples=500, deadline=None)
@given(_JSON)
def test_canonical_json_is_json_dumps_with_sorted_keys_and_no_spaces(value: Any) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected


def test_a_value_json_cannot_hold_hashes_to_nothing_a_row_can_match() -> None:
    # On SQLite a text column takes bytes written by hand (CAST(... AS BLOB)): Verify must
    # name that row as edited, not fail on it (found by an attack on the audit service).
    values = tuple("x" if field != "duration_ms" else 5 for field in HASHED_FIELDS)
    honest = values_hash(values)
    params = HASHED_FIELDS.index("params_json")
    tampered = values[:params] + (b"x",) + values[params + 1 :]
    assert values_hash(tampered) != honest
    assert values_hash(tampered) == UNHASHABLE
