"""`reachstore mcp`: the public API as Model Context Protocol tools, for agents.

A client of the system like any other: it calls the services through the Python SDK
(``reachstore.AsyncClient``) with the caller's own API key and imports no service, no
store and no embedder (an import-linter contract in pyproject.toml). Every answer keeps
the system's partial-failure contract: a tool result's ``structuredContent`` carries the
coverage and the failures in the PartialFailure shape every other interface uses, and
``isError`` marks only a request refused as a whole. docs/MCP.md describes it.

- ``catalogue.py``: which tools exist, their schemas and annotations, and which a key sees.
- ``shapes.py``: SDK results as structured content and the one-line text beside it.
- ``keying.py``: the idempotency key a reach tool derives from its arguments.
- ``calls.py``: what each tool does, over the SDK.
- ``server.py``: the MCP server, over stdio or streamable HTTP.
"""
