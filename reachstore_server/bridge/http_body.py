"""Reading a request body: size cap, media type, and JSON that must be one object.

The size is checked from ``Content-Length`` before a byte is read, and again while reading
(a chunked body has no length up front), so an oversized body never sits in memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from starlette.requests import Request

from reachstore_server.bridge.json_codec import json_type
from reachstore_server.common import errors

MAX_BODY_BYTES = 20 * 1024 * 1024
# Values of any kind (objects, arrays, strings, numbers, ...) one body may hold. The
# request message is built from the decoded body on the bridge's one event loop, at about
# a microsecond per value, before any service can refuse it: six million empty objects
# fit in 17 MiB and held the loop for 13 s (tests/e2e/test_attack18_bridge_many_values.py).
# The largest real bodies hold far fewer: 1,000 audit events, or 100 documents with 32
# metadata entries each.
MAX_JSON_VALUES = 200_000
# JSON can spell a lone UTF-16 surrogate ("\ud800"), which no UTF-8 text (protobuf strings,
# database columns, our own JSON answers) can hold. A pair of escapes decodes to one
# character, so any surrogate left after decoding is a lone one.
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _DuplicateKey(ValueError):
    pass


class _TooManyValues(ValueError):
    pass


def _too_large(limit: int, actual: int, *, at_least: bool) -> errors.ReachstoreError:
    size = f"at least {actual}" if at_least else str(actual)
    return errors.ReachstoreError(
        errors.PAYLOAD_TOO_LARGE,
        f"request body is {size} bytes; the limit is {limit} bytes",
        structured_data={"limit_bytes": limit, "actual_bytes": actual},
    )


def is_json_media_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/<x>+json``, UTF-8 if a charset is named."""
    if not content_type:
        return False
    media_type, *params = (part.strip().lower() for part in content_type.split(";"))
    kind, _, subtype = media_type.partition("/")
    if kind != "application" or not (subtype == "json" or subtype.endswith("+json")):
        return False
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _unsupported(content_type: str | None, *, empty: bool = False) -> errors.ReachstoreError:
    what = "a POST, even with an empty body," if empty else "the body"
    return errors.ReachstoreError(
        errors.UNSUPPORTED_MEDIA_TYPE,
        f"send {what} as application/json, not {content_type or 'without a Content-Type'}",
        structured_data={"content_type": content_type or "", "supported": ["application/json"]},
    )


def _declared_length(request: Request) -> int | None:
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        # The HTTP server rejects such requests before they get here; stay safe anyway.
        raise errors.invalid("Content-Length", "must be a whole number of bytes") from None


async def read_body(
    request: Request,
    limit: int = MAX_BODY_BYTES,
    take: Callable[[int], Awaitable[None]] | None = None,
) -> bytes:
    """The whole body, at most ``limit`` bytes; non-empty bodies must be JSON, and so must
    every POST, even an empty one: without a Content-Type, or with text/plain or a form
    type, a web page of any origin can send a POST without the browser asking the server
    first (a CORS "simple" request). application/json makes the browser ask, and the
    bridge never says yes to another origin."""
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise _too_large(limit, declared, at_least=False)
    content_type = request.headers.get("content-type")
    if (declared or request.method == "POST") and not is_json_media_type(content_type):
        raise _unsupported(content_type, empty=not declared)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            # Stop reading: the server discards the rest once the response is sent.
            raise _too_large(limit, received, at_least=True)
        if take is not None:
            await take(len(chunk))  # room in the bridge's budget (body_budget.py)
        chunks.append(chunk)
    body = b"".join(chunks)
    if body and not is_json_media_type(content_type):
        raise _unsupported(content_type)
    return body


def _object_pairs(limit: int) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """The parser's hook for each object: refuses a repeated key, and stops the parse once
    more than ``limit`` objects were made (arrays and scalars are counted after it)."""
    made = 0

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal made
        made += 1
        if made > limit:
            raise _TooManyValues()
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                # Python keeps the last duplicate silently; a strict API says which key it was.
                raise _DuplicateKey(key)
            obj[key] = value
        return obj

    return hook


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _malformed(message: str, **data: Any) -> errors.ReachstoreError:
    return errors.ReachstoreError(errors.MALFORMED_JSON, message, structured_data=data)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body decoded as one JSON object, or MALFORMED_JSON saying what is wrong."""
    if _too_many_values_by_punctuation(body, MAX_JSON_VALUES):
        raise _too_many_values(MAX_JSON_VALUES, "body")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(
            f"body is not valid UTF-8 at byte {exc.start}", position=exc.start
        ) from None
    try:
        value = json.loads(
            text, object_pairs_hook=_object_pairs(MAX_JSON_VALUES), parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise _malformed(
            f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            line=exc.lineno,
            column=exc.colno,
            position=exc.pos,
        ) from None
    except _DuplicateKey as exc:
        key = exc.args[0]
        raise _malformed(f"body repeats the key {key!r}", duplicate_key=key) from None
    except _TooManyValues:
        raise _too_many_values(MAX_JSON_VALUES, "body") from None
    except ValueError as exc:
        raise _malformed(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise _malformed("body is nested too deeply") from None
    if not isinstance(value, dict):
        got = json_type(value)
        raise _malformed(f"the body must be a JSON object, got {got}", expected="object", got=got)
    _walk(value, MAX_JSON_VALUES, surrogates=bool(_SURROGATE_ESCAPE.search(text)))
    return value


def _too_many_values_by_punctuation(body: bytes, limit: int) -> bool:
    """Whether ``body`` surely holds more than ``limit`` values, told from its punctuation
    before the parser builds them: the parser decodes every array and scalar before any
    hook runs, and ten million empty arrays in 20 MiB held the loop for 4-8 s.

    Counted with bytes methods only (a regular expression over two million short strings
    took a second). Every array or object is a value, a container of n values holds n - 1
    commas, and every string is a key (one per member value) or a value, so a body holds
    at least max(brackets, commas + 1, strings / 2) values, counting punctuation outside
    strings, and at most 1 + commas + brackets."""
    if 1 + body.count(b",") + body.count(b"[") + body.count(b"{") <= limit:
        return False  # even the punctuation inside strings cannot make it more
    # Escaped backslashes and quotes out of the way, every quote left opens or ends a string.
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = plain.count(b'"') // 2
    if strings / 2 > limit:
        return True
    # At most 2 * limit strings: splitting them off is quick.
    outside = b"".join(plain.split(b'"')[::2])
    brackets = outside.count(b"[") + outside.count(b"{")
    return max(brackets, outside.count(b",") + 1) > limit


def _too_many_values(limit: int, path: str) -> errors.ReachstoreError:
    return errors.ReachstoreError(
        errors.PAYLOAD_TOO_LARGE,
        f"the body holds more than {limit} JSON values"
        + ("" if path == "body" else f" (the first beyond them: {path})")
        + "; split it into several requests",
        structured_data={"limit_values": limit, "field": path},
    )


# Where a value sits in a body: its parent's place and its key or index (None at the top).
_Place = tuple["_Place", str | int] | None


def _walk(body: dict[str, Any], limit: int, *, surrogates: bool) -> None:
    """Every value of ``body``, in document order: PAYLOAD_TOO_LARGE at the first value
    beyond ``limit``, and (with ``surrogates``) INVALID_ARGUMENT naming the first field
    whose text holds a lone surrogate; for an object key, the object that holds it
    ("body" at the top). Walked depth first with a stack of iterators (a body may nest as
    deep as the JSON parser allows), so the walk holds one entry per level, and a value's
    path is spelled only for the one refused: spelled for every value, a 2 MiB body of a
    million values 800 objects deep took 1.7 GiB of path strings, kept after the answer."""
    if surrogates and any(_SURROGATE.search(key) for key in body):
        raise _lone_surrogate("body")
    stack: list[tuple[_Place, Iterator[tuple[str | int, Any]]]] = [(None, iter(body.items()))]
    counted = 1
    while stack:
        place, items = stack[-1]
        item: tuple[str | int, Any] | None = next(items, None)
        if item is None:
            stack.pop()
            continue
        here: _Place = (place, item[0])
        counted += 1
        if counted > limit:
            raise _too_many_values(limit, _spelled(here))
        value = item[1]
        if isinstance(value, str):
            if surrogates and _SURROGATE.search(value):
                raise _lone_surrogate(_spelled(here))
        elif isinstance(value, dict):
            if surrogates and any(_SURROGATE.search(name) for name in value):
                raise _lone_surrogate(_spelled(here))
            stack.append((here, iter(value.items())))
        elif isinstance(value, list):
            stack.append((here, enumerate(value)))


def _spelled(place: _Place) -> str:
    """A place as a field path: ``a.b[2].c``."""
    parts: list[str | int] = []
    while place is not None:
        place, key = place
        parts.append(key)
    path = ""
    for key in reversed(parts):
        path += f"[{key}]" if isinstance(key, int) else (f".{key}" if path else key)
    return path


def _lone_surrogate(path: str) -> errors.ReachstoreError:
    return errors.invalid(
        path,
        "must be Unicode text: it holds a lone surrogate (a \\ud800-\\udfff escape without "
        "its pair), which JSON can spell and UTF-8 cannot",
    )
