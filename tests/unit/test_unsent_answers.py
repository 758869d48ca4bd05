"""Which connections the bridge cuts off for answers not read
(reachstore_server/bridge/unsent_answers.py), swept at chosen times. The transports here
only report a size; tests/e2e/test_attack18_bridge_unread_answers*.py run the real ones."""

from __future__ import annotations

from typing import Any

from reachstore_server.bridge.unsent_answers import UnsentAnswers

MIB = 1024 * 1024


class _Transport:
    def __init__(self, unsent: int) -> None:
        self.unsent = unsent
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.aborted

    def get_extra_info(self, name: str) -> Any:
        return None  # no socket: nothing in the kernel

    def abort(self) -> None:
        self.aborted = True


class _Connection:
    def __init__(self, name: str, unsent: int) -> None:
        self.client = (name, 0)
        self.transport = _Transport(unsent)


def test_a_caller_that_takes_nothing_is_cut_off_after_the_timeout() -> None:
    answers = UnsentAnswers(timeout_s=3, budget_bytes=100 * MIB)
    still, reading = _Connection("still", 10), _Connection("reading", 6 * MIB)
    for now in (0.0, 1.0, 2.0, 2.9):
        reading.transport.unsent -= MIB
        answers.sweep([still, reading], now)
    assert not still.transport.aborted
    reading.transport.unsent -= MIB
    answers.sweep([still, reading], 3.0)
    assert still.transport.aborted  # however few bytes it left
    assert not reading.transport.aborted
    assert answers.cut_off == {"timeout": 1, "budget": 0}


def test_over_the_budget_those_that_took_nothing_go_before_an_older_reader() -> None:
    answers = UnsentAnswers(timeout_s=30, budget_bytes=13 * MIB)
    reader = _Connection("reader", 6 * MIB)
    answers.sweep([reader], 0.0)
    reader.transport.unsent -= 1
    answers.sweep([reader], 1.0)  # it took a byte: it reads
    flood = [_Connection(f"flood{n}", 6 * MIB) for n in range(3)]
    answers.sweep([reader, *flood], 2.0)
    assert not reader.transport.aborted
    assert [c.transport.aborted for c in flood] == [True, True, False]
    assert answers.cut_off == {"timeout": 0, "budget": 2}


def test_a_connection_that_sent_everything_is_forgotten() -> None:
    answers = UnsentAnswers(timeout_s=3, budget_bytes=100 * MIB)
    done = _Connection("done", MIB)
    answers.sweep([done], 0.0)
    done.transport.unsent = 0
    answers.sweep([done], 1.0)
    done.transport.unsent = MIB  # the next answer on the same connection starts afresh
    answers.sweep([done], 3.5)
    answers.sweep([done], 6.0)
    assert not done.transport.aborted
    answers.sweep([done], 6.5)
    assert done.transport.aborted
