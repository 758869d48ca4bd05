"""The operator console: static files served by the bridge under ``/console``.

Plain HTML, CSS and JavaScript modules shipped inside the package (no build step, nothing
fetched from elsewhere, so it works offline). The page talks only to the public REST API
under ``/api/v1`` with the operator's key; this module serves files and nothing else.
Files are read once at start-up from the package, so a wheel install serves the same.
"""

from __future__ import annotations

import importlib.resources
import uuid
from collections.abc import Mapping

from starlette.responses import RedirectResponse, Response
from starlette.types import Receive, Scope, Send

from reachstore_server.bridge import error_responses
from reachstore_server.common import errors

PREFIX = "/console"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Everything comes from this origin: no inline script, no third-party host, no framing.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_files() -> dict[str, tuple[bytes, str]]:
    """Relative path -> (content, media type) of every file under ``static/``."""
    found: dict[str, tuple[bytes, str]] = {}
    root = importlib.resources.files(__name__) / "static"

    def walk(folder: importlib.resources.abc.Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
                continue
            suffix = "." + entry.name.rpartition(".")[2]
            if suffix in _TYPES:
                found[prefix + entry.name] = (entry.read_bytes(), _TYPES[suffix])

    walk(root, "")
    return found


class Console:
    """ASGI endpoint for ``/console`` and everything under it."""

    def __init__(self, files: Mapping[str, tuple[bytes, str]] | None = None) -> None:
        self._files = dict(files if files is not None else load_files())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = self._respond(scope)
        await response(scope, receive, send)

    def _respond(self, scope: Scope) -> Response:
        path: str = scope["path"]
        method: str = scope["method"]
        if method not in ("GET", "HEAD"):
            error = errors.ReachstoreError(
                errors.METHOD_NOT_ALLOWED,
                f"{method} is not allowed on {path}; use GET",
                structured_data={"method": method, "allowed": ["GET", "HEAD"]},
            )
            return error_responses.from_error(error, uuid.uuid4().hex, {"Allow": "GET, HEAD"})
        if path == PREFIX:
            return RedirectResponse(PREFIX + "/", status_code=308)
        name = path.removeprefix(PREFIX + "/") or "index.html"
        found = self._files.get(name)
        if found is None:
            error = errors.ReachstoreError(
                errors.ROUTE_NOT_FOUND,
                f"the console has no file {name[:120]!r}",
                structured_data={"path": path[:200]},
            )
            return error_responses.from_error(error, uuid.uuid4().hex)
        content, media_type = found
        return Response(content, media_type=media_type, headers=_HEADERS)
