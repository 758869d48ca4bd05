"""The signature on searches one query member forwards to another (membership.py): only
a live member's secret makes it, over exactly the request it was made for, and briefly."""

from __future__ import annotations

from reachstore_server.query.shards.membership import HOP_SKEW_S, Membership
from reachstore_server.storage.query_members import Member


class _Table:
    """The members table of the shared database, as the two members' heartbeats see it."""

    def __init__(self) -> None:
        self.rows: dict[str, Member] = {}

    def heartbeat(
        self, member_id: str, address: str, state: str, hop_secret: str, lease_s: float
    ) -> list[Member]:
        self.rows[member_id] = Member(member_id, address, state, hop_secret, 0.0, 0.0)
        return list(self.rows.values())

    def leave(self, member_id: str) -> None:
        self.rows.pop(member_id, None)


def _pair() -> tuple[Membership, Membership]:
    table = _Table()
    a = Membership(table, "127.0.0.1:1", 2, 5.0, member_id="a")  # type: ignore[arg-type]
    b = Membership(table, "127.0.0.1:2", 2, 5.0, member_id="b")  # type: ignore[arg-type]
    a.beat()
    b.beat()
    a.beat()
    return a, b


def test_a_members_signature_verifies_at_another() -> None:
    a, b = _pair()
    assert b.verify(a.sign(b"request", now=1000.0), b"request", now=1000.0)


def test_another_request_a_stale_stamp_or_a_guessed_secret_does_not_verify() -> None:
    a, b = _pair()
    header = a.sign(b"request", now=1000.0)
    assert not b.verify(header, b"other request", now=1000.0)
    assert not b.verify(header, b"request", now=1000.0 + HOP_SKEW_S + 1)
    member, stamp, mac = header.split(".")
    assert not b.verify(f"{member}.{stamp}.{'0' * len(mac)}", b"request", now=1000.0)
    assert not b.verify(f"{member}.{int(stamp) + 1}.{mac}", b"request", now=1000.0)
    assert not b.verify(f"nobody.{stamp}.{mac}", b"request", now=1000.0)
    assert not b.verify("garbage", b"request", now=1000.0)


def test_a_member_that_left_no_longer_signs_for_the_others() -> None:
    a, b = _pair()
    header = a.sign(b"request", now=1000.0)
    a.stop()
    b.beat()
    assert not b.verify(header, b"request", now=1000.0)
