"""An integer argument written as a JSON number with a fraction part of zero.

JSON Schema (the draft the tools' ``inputSchema`` follows, 2020-12) counts ``5.0`` as an
integer, and JSON itself does not tell ``5`` from ``5.0``: many JSON encoders, and the
models behind agents, write whole numbers as floats. ``query`` accepts ``top_k: 5.0`` and
``timeout_ms: 300.0`` as valid against its own schema, then hands the float to the
services' client, which refuses it with a Python exception that is not an API error. The
caller gets a bare JSON-RPC "Internal server error": no tool result, no ``isError``, no
error code, category or field. The contract says a whole-request problem is ``isError``
with the REST API's error body (INVALID_ARGUMENT naming the field) — or, since the value
is inside the schema, simply an answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.system import RunningSystem
from tests.mcp.mcp_support import connect

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    "extra", [{"top_k": 5.0}, {"timeout_ms": 3000.0}], ids=["top_k", "timeout_ms"]
)
def test_a_whole_number_written_as_a_float_is_answered_not_an_internal_error(
    system: RunningSystem,
    mcp_url: str,
    keys: dict[str, str],
    corpus: None,
    extra: dict[str, Any],
) -> None:
    async def ask() -> Any:
        async with connect("http", system, mcp_url, keys["agent"]) as client:
            try:
                return await client.call_tool(
                    "query", {"namespaces": ["fast"], "question": "rivers", **extra}
                )
            except MCPError as exc:
                return exc

    result = asyncio.run(ask())
    assert not isinstance(result, MCPError), (
        f"JSON-RPC error instead of a tool result: {result.error.code} {result.error.message!r}"
    )
    if result.is_error:
        # Refusing it is acceptable only as the API's own error, the field named.
        error = result.structured_content["error"]
        assert error["error_code"] == "INVALID_ARGUMENT"
        assert error["structured_data"]["field"] == next(iter(extra))
    else:
        assert result.structured_content["meta"]["coverage_ratio"] == 1.0
