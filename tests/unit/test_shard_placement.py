"""Rendezvous placement of namespaces over query members (reachstore_server/query/shards/)."""

from __future__ import annotations

import collections

from reachstore_server.query.shards.placement import owners, replicas_for, shard_key

KEYS = [shard_key("acme", f"ns-{i}") for i in range(2000)]


def test_owners_are_distinct_members_and_the_same_whatever_the_member_order() -> None:
    members = [f"m{i}" for i in range(5)]
    for key in KEYS[:200]:
        chosen = owners(key, members, 2)
        assert len(chosen) == 2 and len(set(chosen)) == 2
        assert owners(key, list(reversed(members)), 2) == chosen


def test_each_member_holds_about_r_over_n_of_the_namespaces() -> None:
    members = [f"m{i}" for i in range(4)]
    held = collections.Counter(m for key in KEYS for m in owners(key, members, 2))
    for member in members:
        share = held[member] / len(KEYS)
        assert 0.44 < share < 0.56, held  # 2/4, within sampling noise of 2,000 keys


def test_a_member_joining_moves_only_what_it_wins() -> None:
    before = [f"m{i}" for i in range(4)]
    after = [*before, "m4"]
    moved = 0
    for key in KEYS:
        old, new = set(owners(key, before, 2)), set(owners(key, after, 2))
        # Only the newcomer enters a namespace's owners; nobody else changes places.
        assert new - old <= {"m4"}
        moved += len(new - old)
    assert 0.3 < moved / len(KEYS) < 0.5  # about R/N' = 2/5 of the namespaces


def test_a_member_leaving_keeps_every_surviving_owner() -> None:
    before = [f"m{i}" for i in range(4)]
    after = before[1:]
    for key in KEYS:
        old, new = owners(key, before, 2), owners(key, after, 2)
        assert set(old) - {"m0"} <= set(new)


def test_tenants_with_the_same_namespace_name_are_placed_apart() -> None:
    members = [f"m{i}" for i in range(8)]
    differ = sum(
        owners(shard_key("t1", f"ns-{i}"), members, 2)
        != owners(shard_key("t2", f"ns-{i}"), members, 2)
        for i in range(200)
    )
    assert differ > 150


def test_replicas_never_exceed_the_members() -> None:
    assert replicas_for(["a"], 2) == 1
    assert replicas_for(["a", "b", "c"], 2) == 2
    assert replicas_for([], 2) == 1
