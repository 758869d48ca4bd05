"""What one member's view says of another's index (membership.py ``View``): a member that
publishes a namespace as still loading is not listed as ready and is asked last, so a
move is visible as a move (docs/SHARDS.md, "Seeing it")."""

from __future__ import annotations

from reachstore_server.query.shards.membership import View
from reachstore_server.query.shards.placement import owners, shard_key
from reachstore_server.storage.query_members import Member

KEY = shard_key("acme", "orders")


def _member(member_id: str, loading: frozenset[str] = frozenset()) -> Member:
    return Member(member_id, f"{member_id}:1", "serving", 0.0, 10.0, loading)


def test_a_member_that_says_it_is_loading_is_asked_last_and_not_ready() -> None:
    best, second = owners(KEY, ["a", "b"], 2)
    members = (_member(best, frozenset({KEY})), _member(second))
    view = View("a", members, 2)
    assert [m.member_id for m in view.route_owners(KEY)] == [second, best]
    assert not view.ready(members[0], KEY) and view.ready(members[1], KEY)


def test_without_loads_the_owners_keep_their_rank() -> None:
    best, second = owners(KEY, ["a", "b"], 2)
    view = View("a", (_member("a"), _member("b")), 2)
    assert [m.member_id for m in view.route_owners(KEY)] == [best, second]
