"""A Struct number too large for a double must be refused naming the field (docs/LIMITS.md,
"Struct values (reach params)": 400 / INVALID_ARGUMENT naming the field), not end as the
bridge's 500 INTERNAL: ``json_format.ParseDict`` raises ``OverflowError`` converting a
309-4300 digit integer, which ``json_codec._fill_wkt`` does not catch. A 4 KiB body to
POST /api/v1/reach/tasks got 500 and a logged traceback on a real bridge."""

from __future__ import annotations

import pytest

from reachstore_server.bridge import http_body
from reachstore_server.bridge.backends import DEFAULT_SERVICES
from reachstore_server.bridge.request_builder import build_request
from reachstore_server.bridge.routes import RouteTable
from reachstore_server.common import errors


def test_a_struct_integer_beyond_a_double_is_an_invalid_argument() -> None:
    match = RouteTable(DEFAULT_SERVICES).match("POST", "/api/v1/reach/tasks")
    assert match.route is not None
    body = http_body.parse_json_object(b'{"actions":[{"params":{"x":' + b"9" * 400 + b"}}]}")
    with pytest.raises(errors.ReachstoreError) as raised:
        build_request(match.route, body, match.path_params, [])
    assert raised.value.code == "INVALID_ARGUMENT"
    assert raised.value.failure.structured_data["field"].startswith("actions[0].params")
