"""A bearer token that is not ASCII.

HTTP header values are bytes; a client (or an attacker) can send ``Authorization: Bearer``
followed by Latin-1 bytes. The server passes the token on as gRPC metadata, which must be
printable ASCII, and the gRPC library refuses it with an exception that is not an API
error. The caller then gets a JSON-RPC error with code 0 whose message is the gRPC
library's internals ("Failed "execute_batch": (<grpc._cython.cygrpc.SendInitialMetadata
Operation object at 0x7f...>, ...") — no error code, no category, memory addresses of the
process in the answer — where any key the services cannot accept is an ``auth`` refusal
(``tools/list``: a JSON-RPC error whose data is the API's error body; ``tools/call``:
``isError`` with that body). An agent deciding from ``category`` cannot tell this from a
server fault and may retry forever.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.system import RunningSystem

pytestmark = pytest.mark.e2e

# "rsk_" and Latin-1 bytes, as a client that does not encode to ASCII sends them.
BAD_BEARER = b"Bearer rsk_\xe9\xe9\xe9\xe9_\xe9\xe9\xe9\xe9"


def _rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
        headers=[
            (b"Accept", b"application/json, text/event-stream"),
            (b"Authorization", BAD_BEARER),
        ],
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_non_ascii_bearer_is_refused_as_auth_on_tools_list(
    system: RunningSystem, mcp_url: str
) -> None:
    error = _rpc(mcp_url, "tools/list", {})["error"]
    assert "cygrpc" not in error["message"], error["message"]
    assert isinstance(error.get("data"), dict), error
    assert error["data"]["category"] == "auth", error


def test_a_non_ascii_bearer_is_refused_as_auth_on_tools_call(
    system: RunningSystem, mcp_url: str
) -> None:
    arguments = {"namespaces": ["x"], "question": "y"}
    answer = _rpc(mcp_url, "tools/call", {"name": "query", "arguments": arguments})
    assert "result" in answer, answer.get("error", {}).get("message", "")[:300]
    result = answer["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["category"] == "auth", result
