"""A ``google.protobuf.Struct`` as plain Python values, quickly.

``json_format.MessageToDict`` walks a Struct through protobuf's generic printer (field
descriptors, type checks per value); on the audit service's append path that was 15 % of
its time (py-spy). This gives the same result for every Struct whose numbers are finite:
numbers as floats, as ``MessageToDict`` gives them. A Struct holding NaN or an infinity,
which JSON cannot hold (``MessageToDict`` refuses those too), raises ``NotFinite``: the
caller's mistake, for the caller to name.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2


class NotFinite(ValueError):
    """A number of the Struct is NaN or an infinity."""


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise NotFinite
        return number
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        fields = value.struct_value.fields
        # By key, not .items(): protobuf's map has no items() of its own, and the generic
        # one it inherits costs more than the lookups (py-spy on the audit service).
        return {key: _value(fields[key]) for key in fields}
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    return None  # null_value, or no kind set (which MessageToDict also prints as null)


def struct_to_python(struct: struct_pb2.Struct) -> dict[str, Any]:
    """``json_format.MessageToDict(struct)``, without its generic machinery. Raises
    ``NotFinite`` where that raises ``ValueError``: a number that is NaN or an infinity."""
    fields = struct.fields
    return {key: _value(fields[key]) for key in fields}
