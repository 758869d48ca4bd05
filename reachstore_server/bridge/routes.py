"""The route table, built from the ``google.api.http`` option of every RPC.

A template such as ``/api/v1/namespaces/{namespace}/documents:batchCreate`` becomes a
regular expression over the *raw* (still percent-encoded) path, so an encoded ``/`` inside
an id stays inside its variable. Matching tells "no route at all" (404) apart from "the
path exists, but for other methods" (405), because callers fix those two differently.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from urllib.parse import unquote

from google.api import annotations_pb2, http_pb2
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from reachstore.common.v1 import http_options_pb2

_HTTP_METHODS = ("get", "put", "post", "delete", "patch")
# A variable is `{name}`, `{name=*}` (one segment) or `{name=**}` (the rest of the path).
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)(?:=([^}]*))?\}")


class RouteTemplateError(ValueError):
    """A ``google.api.http`` rule the bridge cannot serve; raised at start-up, not per request."""


@dataclasses.dataclass(frozen=True)
class Route:
    """One RPC reachable over HTTP."""

    http_method: str  # upper case: GET, POST, ...
    template: str  # as written in the proto, e.g. /api/v1/tasks/{task_id}:cancel
    service: ServiceDescriptor
    method: MethodDescriptor
    body: str  # "*" (whole request from the body), a field name, or "" (no body)
    success_status: int
    variables: tuple[str, ...]  # field paths bound by the template, in order
    literal_segments: int  # how specific the template is; more literals win a tie
    pattern: re.Pattern[str] = dataclasses.field(repr=False, compare=False)

    @property
    def grpc_path(self) -> str:
        return f"/{self.service.full_name}/{self.method.name}"

    @property
    def has_verb(self) -> bool:
        last = self.template.rsplit("/", 1)[-1]
        return ":" in _VARIABLE.sub("", last)

    def match(self, raw_path: str) -> dict[str, str] | None:
        """Path parameters (percent-decoded) when ``raw_path`` fits this template, else None."""
        found = self.pattern.fullmatch(raw_path)
        if found is None:
            return None
        return {name: unquote(found.group(f"v{i}")) for i, name in enumerate(self.variables)}


@dataclasses.dataclass(frozen=True)
class Match:
    """The outcome of matching one request: a route, or the methods the path allows."""

    route: Route | None
    path_params: dict[str, str]
    allowed: tuple[str, ...]  # non-empty only when the path exists for other methods


def _compile(template: str) -> tuple[re.Pattern[str], tuple[str, ...], int]:
    if not template.startswith("/"):
        raise RouteTemplateError(f"template must start with '/': {template!r}")
    parts: list[str] = []
    names: list[str] = []
    position = 0
    for found in _VARIABLE.finditer(template):
        parts.append(re.escape(template[position : found.start()]))
        name, sub = found.group(1), found.group(2)
        if sub in (None, "*"):
            parts.append(f"(?P<v{len(names)}>[^/]+)")
        elif sub == "**":
            parts.append(f"(?P<v{len(names)}>.+)")
        else:
            # Multi-segment sub-templates (`{name=foo/*}`) are legal in google.api.http but
            # unused by reachstore; refusing them keeps the matcher small and honest.
            raise RouteTemplateError(
                f"unsupported variable pattern {{{name}={sub}}} in {template!r}"
            )
        names.append(name)
        position = found.end()
    rest = template[position:]
    if "{" in rest or "}" in rest:
        raise RouteTemplateError(f"unbalanced braces in {template!r}")
    parts.append(re.escape(rest))
    literal_text = _VARIABLE.sub("", template)
    literals = len([segment for segment in literal_text.split("/") if segment])
    return re.compile("".join(parts)), tuple(names), literals


def _rules(method: MethodDescriptor) -> list[http_pb2.HttpRule]:
    options = method.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        return []
    rule = options.Extensions[annotations_pb2.http]
    return [rule, *rule.additional_bindings]


def _success_status(method: MethodDescriptor) -> int:
    options = method.GetOptions()
    if options.HasExtension(http_options_pb2.http_success_status):
        return options.Extensions[http_options_pb2.http_success_status] or 200
    return 200


def _build(service: ServiceDescriptor, method: MethodDescriptor, rule: http_pb2.HttpRule) -> Route:
    kind = rule.WhichOneof("pattern")
    if kind not in _HTTP_METHODS:
        raise RouteTemplateError(f"{method.full_name}: unsupported HTTP pattern {kind!r}")
    template = getattr(rule, kind)
    if rule.body not in ("", "*"):
        # A body bound to one field is legal but unused; fail at start-up rather than
        # serve a route the codec would merge wrongly.
        raise RouteTemplateError(f"{method.full_name}: body {rule.body!r} is not supported")
    pattern, variables, literals = _compile(template)
    for name in variables:
        if name.split(".")[0] not in method.input_type.fields_by_name:
            raise RouteTemplateError(f"{method.full_name}: {{{name}}} is not a request field")
    return Route(
        http_method=kind.upper(),
        template=template,
        service=service,
        method=method,
        body=rule.body,
        success_status=_success_status(method),
        variables=variables,
        literal_segments=literals,
        pattern=pattern,
    )


class RouteTable:
    """Every HTTP route of the given services, most specific first."""

    def __init__(self, services: Iterable[ServiceDescriptor]) -> None:
        self.services: tuple[ServiceDescriptor, ...] = tuple(services)
        routes = [
            _build(service, method, rule)
            for service in self.services
            for method in service.methods
            for rule in _rules(method)
        ]
        # A literal verb (`documents:batchCreate`) or more literal segments beat a variable
        # that would also match the same text, so the most specific route is tried first.
        routes.sort(key=lambda r: (-r.literal_segments, not r.has_verb, len(r.variables)))
        self.routes: tuple[Route, ...] = tuple(routes)

    def match(self, http_method: str, raw_path: str) -> Match:
        allowed: list[str] = []
        for route in self.routes:
            params = route.match(raw_path)
            if params is None:
                continue
            if route.http_method == http_method.upper():
                return Match(route, params, ())
            if route.http_method not in allowed:
                allowed.append(route.http_method)
        return Match(None, {}, tuple(sorted(allowed)))
