"""The signature on searches one query member forwards to another (membership.py): only
a holder of the members' shared secret makes it, over exactly the request it was made
for, briefly, by the database's clock rather than the signer's own."""

from __future__ import annotations

import time

from reachstore_server.query.shards.membership import HOP_SKEW_S, Membership
from reachstore_server.storage.query_members import Member

SECRET = "s" * 32


class _Table:
    """The members table of the shared database, as the members' heartbeats see it; its
    clock is ``db_now`` (the database's, not the members')."""

    def __init__(self) -> None:
        self.rows: dict[str, Member] = {}
        self.db_now = time.time()

    def heartbeat(
        self, member_id: str, address: str, state: str, lease_s: float, loading: object = ()
    ) -> list[Member]:
        self.rows[member_id] = Member(member_id, address, state, 0.0, self.db_now)
        return list(self.rows.values())

    def leave(self, member_id: str) -> None:
        self.rows.pop(member_id, None)


def _member(table: _Table, member_id: str, secret: str = SECRET) -> Membership:
    member = Membership(table, f"127.0.0.1:{len(table.rows) + 1}", 2, 5.0, secret, member_id)  # type: ignore[arg-type]
    member.beat()
    return member


def test_a_members_signature_verifies_at_another() -> None:
    table = _Table()
    a, b = _member(table, "a"), _member(table, "b")
    assert b.verify(a.sign(b"request", now=1000.0), b"request", now=1000.0)
    assert b.verify(a.sign(b"request"), b"request")


def test_another_request_a_stale_stamp_or_a_guessed_secret_does_not_verify() -> None:
    table = _Table()
    a, b = _member(table, "a"), _member(table, "b")
    header = a.sign(b"request", now=1000.0)
    assert not b.verify(header, b"other request", now=1000.0)
    assert not b.verify(header, b"request", now=1000.0 + HOP_SKEW_S + 1)
    member, stamp, mac = header.split(".")
    assert not b.verify(f"{member}.{stamp}.{'0' * len(mac)}", b"request", now=1000.0)
    assert not b.verify(f"{member}.{int(stamp) + 1}.{mac}", b"request", now=1000.0)
    assert not b.verify(f"nobody.{stamp}.{mac}", b"request", now=1000.0)
    assert not b.verify("garbage", b"request", now=1000.0)


def test_a_process_without_the_shared_secret_cannot_sign() -> None:
    table = _Table()
    b = _member(table, "b")
    intruder = _member(table, "x", secret="t" * 32)  # a row in the table is not enough
    assert not b.verify(intruder.sign(b"request"), b"request")


def test_a_member_that_just_joined_signs_before_the_others_see_its_row() -> None:
    table = _Table()
    b = _member(table, "b")
    newcomer = _member(table, "new")  # b has not beaten since: "new" is not in its view
    assert b.view.member("new") is None
    assert b.verify(newcomer.sign(b"request"), b"request")


def test_stamps_follow_the_database_clock_not_the_signers() -> None:
    table = _Table()
    table.db_now = time.time() - 600  # the database's clock is ten minutes behind both
    a, b = _member(table, "a"), _member(table, "b")
    header = a.sign(b"request")
    assert abs(int(header.split(".")[1]) - table.db_now) < 5
    assert b.verify(header, b"request")
