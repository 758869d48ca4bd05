"""``struct_to_python`` gives what ``json_format.MessageToDict`` gives, on many Structs."""

from __future__ import annotations

import json
import random

import pytest
from google.protobuf import json_format, struct_pb2

from reachstore_server.common.structs import NotFinite, struct_to_python


def _random_value(rng: random.Random, depth: int) -> object:
    pick = rng.randrange(7 if depth < 3 else 4)
    if pick == 0:
        return rng.choice(["", "a", "手机 13812345678", "\x00\u2028", "x" * 50])
    if pick == 1:
        return rng.choice([0, -1, 2**53, 3.5, 1e300, -0.0, 12345678901])
    if pick == 2:
        return rng.choice([True, False])
    if pick == 3:
        return None
    if pick in (4, 5):
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_struct_to_python_matches_message_to_dict() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        struct = struct_pb2.Struct()
        struct.update({f"f{i}": _random_value(rng, 0) for i in range(rng.randrange(6))})
        mine, theirs = struct_to_python(struct), json_format.MessageToDict(struct)
        # As text too: 5 == 5.0 in Python, but not in the hashed JSON of an audit event.
        assert json.dumps(mine, sort_keys=True) == json.dumps(theirs, sort_keys=True)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
def test_a_number_that_is_not_finite_is_refused_as_message_to_dict_refuses_it(
    number: float,
) -> None:
    struct = struct_pb2.Struct()
    struct.update({"n": {"deeper": [number]}})
    with pytest.raises(NotFinite):  # a ValueError, named, for the caller to answer
        struct_to_python(struct)
    with pytest.raises(ValueError):
        json_format.MessageToDict(struct)
