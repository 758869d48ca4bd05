"""The tools: their names, descriptions, schemas and annotations, and which of them a key
is shown.

Fixed tools — ``query``, ``ingest``, ``task_status``, ``reach_status`` — and one
``send_<channel>`` tool per reach channel the key may use (``ListChannels`` answers with
the key's allow-list applied). A key is shown only the tools its scopes allow (``read``
for looking, ``write`` for ingest, ``reach`` for sending), then only those its tool
profile names, at most the profile's ``max_tools``: the reach design's "three to five
tools per scenario", trimmed for the caller.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
from mcp_types import Tool, ToolAnnotations

from reachstore import ApiKey, Channel
from reachstore_server.mcp import shapes

CHANNEL_PREFIX = "send_"
MAX_WAIT_MS = 30_000

_WAIT = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_WAIT_MS,
    "default": 0,
    "description": "Wait up to this long for news before answering (0: answer at once).",
}
_DOCUMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["text"],
    "properties": {
        "document_id": {"type": "string", "description": "Empty or absent: the server picks."},
        "text": {"type": "string", "minLength": 1},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

QUERY_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["namespaces", "question"],
    "properties": {
        "namespaces": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": 32,
            "description": 'Namespaces to search at once; ["*"]: every one the key may read.',
        },
        "question": {"type": "string", "minLength": 1, "maxLength": 4096},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
        "timeout_ms": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000,
            "description": "Time budget per namespace (server default 2000 ms).",
        },
        "allow_partial": {
            "type": "boolean",
            "default": True,
            "description": "false: an incomplete answer is an error (INCOMPLETE_RESULT) "
            "instead of a partial result.",
        },
        "filter": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

INGEST_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["namespace"],
    "properties": {
        "namespace": {"type": "string"},
        "document": _DOCUMENT,
        "documents": {"type": "array", "items": _DOCUMENT, "minItems": 1, "maxItems": 100},
        "on_duplicate": {
            "type": "string",
            "enum": ["error", "skip", "overwrite"],
            "default": "error",
        },
    },
}

TASK_STATUS_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task_id"],
    "properties": {
        "task_id": {"type": "string", "minLength": 1},
        "kind": {"type": "string", "enum": ["auto", "ingest", "reach"], "default": "auto"},
        "wait_ms": _WAIT,
    },
}

REACH_STATUS_INPUT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["task_id"],
    "properties": {"task_id": {"type": "string", "minLength": 1}, "wait_ms": _WAIT},
}


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """A tool and what it takes to be shown: the scope it needs, and for a reach tool
    its channel."""

    tool: Tool
    scope: str
    channel: Channel | None = None

    @property
    def name(self) -> str:
        return self.tool.name


def _annotations(
    title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )


FIXED_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        Tool(
            name="query",
            description=(
                "Searches several namespaces at once and answers with what worked: results "
                "best first, meta.coverage_ratio (answered / asked) and one failure per "
                "missing namespace with its category and retry advice (retryable, "
                "retry_after_ms). Retry only the retryable namespaces, after their wait. "
                "Reads only."
            ),
            input_schema=QUERY_INPUT,
            output_schema=shapes.QUERY_OUTPUT,
            annotations=_annotations(
                "Search namespaces",
                read_only=True,
                destructive=False,
                idempotent=True,
                open_world=False,
            ),
        ),
        "read",
    ),
    ToolSpec(
        Tool(
            name="ingest",
            description=(
                "Stores one document (document) or up to 100 (documents) in a namespace. "
                "Accepting only queues them: follow each task with task_status; a document "
                "is searchable once its task completes. Documents refused on their own are "
                "listed in meta.failed while the rest are accepted. on_duplicate=overwrite "
                "replaces a stored document. Calling again submits again."
            ),
            input_schema=INGEST_INPUT,
            output_schema=shapes.INGEST_OUTPUT,
            annotations=_annotations(
                "Store documents",
                read_only=False,
                destructive=True,
                idempotent=False,
                open_world=False,
            ),
        ),
        "write",
    ),
    ToolSpec(
        Tool(
            name="task_status",
            description=(
                "Where an ingest or reach task stands, with agent_decision_hint: poll_again "
                "(after poll_after_ms), done_fetch_doc or done, inspect_error_code, "
                "wait_for_operator, stop. Reads only."
            ),
            input_schema=TASK_STATUS_INPUT,
            output_schema=shapes.TASK_STATUS_OUTPUT,
            annotations=_annotations(
                "Task progress",
                read_only=True,
                destructive=False,
                idempotent=True,
                open_world=False,
            ),
        ),
        "read",
    ),
    ToolSpec(
        Tool(
            name="reach_status",
            description=(
                "A reach task's actions: each one's state, idempotency key, receipts from the "
                "receiver and failure (category, business or technical, retry advice). "
                "An unknown action may have taken effect: never send it again yourself. "
                "Reads only."
            ),
            input_schema=REACH_STATUS_INPUT,
            output_schema=shapes.REACH_STATUS_OUTPUT,
            annotations=_annotations(
                "Reach task detail",
                read_only=True,
                destructive=False,
                idempotent=True,
                open_world=False,
            ),
        ),
        "read",
    ),
)


def channel_input_schema(channel: Channel) -> dict[str, Any]:
    """The tool's arguments: the entity acted on, the action type (when the channel has
    several), the channel's own JSON Schema as ``params``, and how long to wait."""
    properties: dict[str, Any] = {
        "entity_id": {
            "type": "string",
            "minLength": 1,
            "description": "The business entity acted on (an order, a ticket, a customer).",
        },
        "params": dict(channel.parameters_schema) or {"type": "object"},
        "wait_ms": _WAIT,
    }
    required = ["entity_id", "params"]
    if channel.action_types:
        properties["action_type"] = {"type": "string", "enum": list(channel.action_types)}
        if len(channel.action_types) > 1:
            required.append("action_type")
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


def channel_tool(channel: Channel) -> ToolSpec:
    rules = "".join(f" Rule: {rule}." for rule in channel.rules)
    description = (
        f"{channel.description.rstrip('.')}. Side effect outside reachstore: "
        f"{channel.side_effect.rstrip('.')}. Sent at most once: calling again with the same "
        "arguments the same day returns the same action (deduplicated), and an action whose "
        f"outcome is unclear becomes unknown, never a second send.{rules}"
    )
    return ToolSpec(
        Tool(
            name=f"{CHANNEL_PREFIX}{channel.name}",
            description=description,
            input_schema=channel_input_schema(channel),
            output_schema=shapes.REACH_TOOL_OUTPUT,
            annotations=_annotations(
                f"Send through {channel.name}",
                read_only=False,
                # What the receiver does cannot be undone by reachstore.
                destructive=True,
                # Whether repeating the action at the receiver is harmless, as the channel's
                # configuration declares it.
                idempotent=channel.idempotent,
                open_world=True,
            ),
        ),
        "reach",
        channel,
    )


# --- profiles ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ToolProfile:
    """Which tools a key is shown: the names (``fnmatch`` patterns, in the order to keep),
    None for all; and at most how many."""

    tools: tuple[str, ...] | None = None
    max_tools: int | None = None


class ProfileError(ValueError):
    """The profile file is unreadable or malformed."""


@dataclasses.dataclass(frozen=True)
class Profiles:
    """Tool profiles by key id; ``default`` for keys without their own (and the keyless
    local caller)."""

    default: ToolProfile = ToolProfile()
    by_key: Mapping[str, ToolProfile] = dataclasses.field(default_factory=dict)

    def of(self, key_id: str) -> ToolProfile:
        return self.by_key.get(key_id, self.default)


def _profile(data: Any, where: str) -> ToolProfile:
    if not isinstance(data, dict) or set(data) - {"tools", "max_tools"}:
        raise ProfileError(f"{where}: a table with tools (a list of names) and max_tools")
    tools = data.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, str) and t for t in tools)
    ):
        raise ProfileError(f"{where}.tools: a list of tool names or patterns")
    limit = data.get("max_tools")
    if limit is not None and not (isinstance(limit, int) and limit >= 1):
        raise ProfileError(f"{where}.max_tools: a whole number of 1 or more")
    return ToolProfile(tuple(tools) if tools is not None else None, limit)


def load_profiles(path: Path | None, max_tools: int | None = None) -> Profiles:
    """The profiles of a TOML file (``[default]`` and ``[keys.<key id>]`` tables; see
    docs/MCP.md); ``max_tools`` caps the default when the file sets none."""
    if path is None:
        return Profiles(ToolProfile(None, max_tools))
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path}: {exc}") from exc
    if set(data) - {"default", "keys"}:
        raise ProfileError(f"{path}: only [default] and [keys.<key id>] tables")
    default = _profile(data.get("default", {}), "default")
    if default.max_tools is None and max_tools is not None:
        default = dataclasses.replace(default, max_tools=max_tools)
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise ProfileError("keys: tables named by key id")
    return Profiles(default, {k: _profile(v, f"keys.{k}") for k, v in keys.items()})


def tools_for(key: ApiKey, channels: Sequence[Channel], profile: ToolProfile) -> list[ToolSpec]:
    """The tools ``key`` is shown, in order: the fixed tools, then the channels' by name;
    or the profile's order when it names them."""
    scopes = set(key.scopes)
    reach = [channel_tool(c) for c in sorted(channels, key=lambda c: c.name)]
    reach = [t for t in reach if _may(t, scopes)]
    # reach_status follows what a send_* tool reserved: shown beside them only.
    fixed = [t for t in FIXED_TOOLS if _may(t, scopes) and (t.name != "reach_status" or reach)]
    allowed = fixed + reach
    if profile.tools is not None:
        allowed = _in_profile_order(allowed, profile.tools)
    return allowed[: profile.max_tools] if profile.max_tools else allowed


def _may(tool: ToolSpec, scopes: set[str]) -> bool:
    # Ingesting needs only `write`; every other tool reads, and a reach tool reads back
    # the action it reserved, so it needs `read` beside `reach`.
    if tool.scope == "write":
        return "write" in scopes
    return tool.scope in scopes and "read" in scopes


def _in_profile_order(tools: Iterable[ToolSpec], patterns: Sequence[str]) -> list[ToolSpec]:
    remaining = list(tools)
    kept: list[ToolSpec] = []
    for pattern in patterns:
        for tool in [t for t in remaining if fnmatch.fnmatchcase(t.name, pattern)]:
            kept.append(tool)
            remaining.remove(tool)
    return kept


# --- arguments --------------------------------------------------------------------------------


class ArgumentError(ValueError):
    """An argument outside the tool's schema: ``field`` names it (``documents[2].text``)."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


def _field(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _integers(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` with every number its ``schema`` types ``integer`` as an ``int``.

    JSON Schema counts ``5.0`` as an integer, so it passes ``check_arguments``; the
    services' fields are int64, and a float there is not an API error but a crash. A
    non-integral float never gets here: the schema refuses it, naming the field."""
    if schema.get("type") == "integer" and isinstance(value, float):
        return int(value)
    if isinstance(value, dict) and "properties" in schema:
        known = schema["properties"]
        return {k: _integers(known[k], v) if k in known else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_integers(schema["items"], v) for v in value]
    return value


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` as the tools use them (integers as ``int``, see ``_integers``).

    Raises ``ArgumentError`` naming the first argument that breaks ``schema``."""
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    if error is None:
        result: dict[str, Any] = _integers(schema, dict(arguments))
        return result
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = next((n for n in error.validator_value if n not in error.instance), None)
        raise ArgumentError(_field([*path, missing]) if missing else _field(path), "required")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {})
        extra = sorted(n for n in error.instance if n not in known)
        if extra:
            raise ArgumentError(_field([*path, extra[0]]), "not an argument of this tool")
    raise ArgumentError(_field(path) or "arguments", error.message)
