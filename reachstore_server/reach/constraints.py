"""What a reach channel accepts: a JSON Schema for the shape of ``params`` and CEL rules.

A channel's TOML file declares both; ``ParamRules.compile`` checks them once, when the
configuration loads, so a typo fails the start-up rather than every action. ``check`` runs
in the channel's validate step, before anything is reserved or sent, and answers with a
list of ``Violation``, never an exception: a rule that cannot be evaluated is itself a
violation, because an action that cannot be checked must not go out.

The schema runs first and the rules only when it passes, so a rule can rely on the shape
the schema describes, and a bound such as ``maxItems`` stops an oversized list before any
rule walks it. The schema is Draft 2020-12; a ``$ref`` resolves within the schema (nothing
is fetched); ``format`` is checked, and a format jsonschema cannot check without extra
packages (``uri``, ``date-time``, ...) is refused at compile time rather than silently
ignored. Rules see ``params``, ``caller`` (``tenant``, ``key_id``, ``groups``) and
``action`` (``type``, ``entity_id``).

Numbers. ``params`` arrive from a protobuf ``Struct``, where every number is a double,
while CEL literals such as ``20`` and the result of ``size()`` are ints. cel-python 0.5.0
refuses an int compared with a double (``params.count == 3``,
``size(params.items) <= params.limit``) and accepts ``params.count <= 20`` only because
the double happens to be on the left. We do not turn whole doubles into ints: the type of
a value would then depend on the data (``5`` vs ``5.5``), so ``params.price * 1.1`` or
``params.a / params.b`` would fail, or silently divide as integers, for some inputs only.
Instead numbers stay doubles and the operators treat int and double alike, by value:
comparisons, equality and ``in`` follow the CEL specification's cross-type numeric
comparison (which cel-python 0.5.0 lacks; values of unrelated types are unequal), and
arithmetic mixing an int with a double gives a double (strict CEL would refuse). Authors
write ``params.count <= 20`` and ``params.count == 3`` as they would expect. What stays
double-only: ``%`` (write ``int(params.n) % 10 == 0``, or better ``multipleOf`` in the
schema), a list index (``params.items[int(params.i)]``) and ``type(params.n) == double``.

Violation messages never repeat the offending value (it may be personal data): they say
what a valid value looks like ("must match pattern ^[0-9]+$"), or, for a rule, its
declared message.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import operator
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import celpy
import jsonschema
import jsonschema.protocols
import lark
import referencing
import referencing.exceptions
import referencing.jsonschema
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from reachstore_server.common.config_errors import ConfigError

__all__ = ["ParamRules", "Rule", "Violation"]

MAX_SCHEMA_VIOLATIONS = 20
_DRAFT = "https://json-schema.org/draft/2020-12/schema"
# The formats a schema may use, named here rather than left to what happens to be installed:
# jsonschema checks ``date-time``, ``uri`` and others only when optional packages are present
# (rfc3339-validator arrives with a test tool), so the same channel file would load in one
# environment and be refused in another. These need nothing beyond our own dependencies
# (``idn-hostname`` uses idna, which httpx brings).
CHECKED_FORMATS = ("date", "email", "idn-email", "idn-hostname", "ipv4", "ipv6", "regex", "uuid")
_VARIABLES = frozenset({"params", "caller", "action"})
_RULE_KEYS = frozenset({"expr", "message"})
_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_MACROS = _COMPREHENSIONS | {"has", "dyn"}
# Type names a rule may use as values, as in ``type(params.x) == string``.
_TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "int", "list", "map", "null_type", "string", "type", "uint"}
)


@dataclasses.dataclass(frozen=True)
class Violation:
    """One reason the params are refused: ``field`` is a dotted path below ``params``
    ("items.3.name"; "" for the whole object or a rule), ``rule`` what a valid value is."""

    field: str
    rule: str


@dataclasses.dataclass(frozen=True)
class Rule:
    """One declared rule: a CEL expression that must be true, and what to say when not."""

    expr: str
    message: str


# --- CEL -----------------------------------------------------------------------------

_environment: celpy.Environment | None = None


def _cel() -> celpy.Environment:
    """One shared environment, made on first use (building the parser takes a moment).

    ``celpy.Environment()`` sets the process's recursion limit to 2500 so deep expressions
    parse; we keep that but never let it lower a limit someone else raised.
    """
    global _environment
    if _environment is None:
        before = sys.getrecursionlimit()
        _environment = celpy.Environment()
        sys.setrecursionlimit(max(before, sys.getrecursionlimit()))
    return _environment


_BOOLS = (bool, celtypes.BoolType)


def _number(value: Any) -> int | float | None:
    """The plain value of a CEL (or Python) number; None for anything else, bools included."""
    if isinstance(value, _BOOLS):
        return None
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return int(value)
    return None


def _equal(a: Any, b: Any) -> bool:
    """CEL equality, except that numbers compare by value across int, uint and double, and
    values of different types are unequal rather than an error (as the CEL spec says)."""
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return x == y
    if isinstance(a, _BOOLS) != isinstance(b, _BOOLS):
        return False  # CEL's bool is no number, though Python's (and celpy's) is an int
    if isinstance(a, celtypes.ListType) and isinstance(b, celtypes.ListType):
        return len(a) == len(b) and all(_equal(i, j) for i, j in zip(a, b, strict=True))
    if isinstance(a, celtypes.MapType) and isinstance(b, celtypes.MapType):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except TypeError:
        return False


def _eq(a: Any, b: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    return celtypes.BoolType(_equal(a, b))


def _ne(a: Any, b: Any) -> Any:
    result = _eq(a, b)
    return result if isinstance(result, CELEvalError) else celtypes.BoolType(not result)


def _in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, celtypes.ListType | celtypes.MapType):
        return celtypes.BoolType(any(_equal(item, element) for element in container))
    return base_functions["_in_"](item, container)


def _ordering(name: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    base = base_functions[name]

    def ordered(a: Any, b: Any) -> Any:
        x, y = _number(a), _number(b)
        if x is not None and y is not None:
            return celtypes.BoolType(compare(x, y))
        return base(a, b)

    return ordered


def _arithmetic(name: str) -> Callable[[Any, Any], Any]:
    base = base_functions[name]

    def promoted(a: Any, b: Any) -> Any:
        x, y = _number(a), _number(b)
        if x is not None and y is not None and isinstance(x, float) != isinstance(y, float):
            return base(celtypes.DoubleType(x), celtypes.DoubleType(y))
        return base(a, b)

    return promoted


_FUNCTIONS: dict[str, Any] = {
    "_==_": _eq,
    "_!=_": _ne,
    "_in_": _in,
    "_<_": _ordering("_<_", operator.lt),
    "_<=_": _ordering("_<=_", operator.le),
    "_>_": _ordering("_>_", operator.gt),
    "_>=_": _ordering("_>=_", operator.ge),
    "_+_": _arithmetic("_+_"),
    "_-_": _arithmetic("_-_"),
    "_*_": _arithmetic("_*_"),
    "_/_": _arithmetic("_/_"),
}


def _to_cel(value: Any) -> Any:
    """JSON-like Python data as CEL values (any Mapping or non-string Sequence will do)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, Mapping):
        return celtypes.MapType({celtypes.StringType(str(k)): _to_cel(v) for k, v in value.items()})
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return celtypes.ListType([_to_cel(v) for v in value])
    raise TypeError(f"a {type(value).__name__} is not JSON-like")


def _check_names(ast: lark.Tree, where: str) -> None:
    """Refuses unknown functions and variables now rather than at every evaluation.

    Comprehension variables (``i`` in ``params.items.all(i, ...)``) are accepted anywhere
    in the expression: scoping them exactly would need the type checker cel-python lacks.
    """
    bound = {
        _first_ident(tree.children[2])
        for tree in ast.iter_subtrees()
        if tree.data == "member_dot_arg" and str(tree.children[1]) in _COMPREHENSIONS
    }
    for tree in ast.iter_subtrees():
        token: Any = None
        if tree.data == "ident_arg" or tree.data == "member_dot_arg":
            token = tree.children[0 if tree.data == "ident_arg" else 1]
            if str(token) not in base_functions and str(token) not in _MACROS:
                raise ConfigError(
                    f"{where}: unknown function {str(token)!r} "
                    f"(line {token.line}, column {token.column})"
                )
        elif tree.data == "ident":
            token = tree.children[0]
            name = str(token)
            if name not in _VARIABLES and name not in bound and name not in _TYPE_NAMES:
                raise ConfigError(
                    f"{where}: unknown name {name!r} (line {token.line}, column "
                    f"{token.column}); a rule reads params, caller and action"
                )


def _first_ident(exprlist: Any) -> str:
    """The variable a comprehension binds: the first name in its first argument."""
    if isinstance(exprlist, lark.Tree) and exprlist.children:
        first = exprlist.children[0]
        if isinstance(first, lark.Tree):
            for node in first.iter_subtrees_topdown():
                if node.data == "ident":
                    return str(node.children[0])
    return ""


_TYPE_WORDS = {
    "Bool": "bool",
    "Bytes": "bytes",
    "Double": "double",
    "Int": "int",
    "Uint": "uint",
    "List": "list",
    "Map": "map",
    "String": "string",
    "Message": "map",
}


def _reason(error: BaseException, expr: str) -> str:
    """Why a rule could not be evaluated, in a few words and without any value from the
    params: cel-python's own messages quote values and even the whole activation."""
    cause: Any = type(error)
    if isinstance(error, CELEvalError) and len(error.args) >= 2 and isinstance(error.args[1], type):
        cause = error.args[1]
    if issubclass(cause, KeyError):
        # The key is named only when the rule's own text names it: a key computed from
        # the params could be anything.
        text = str(error.args[0]) if error.args else ""
        named = re.match(r"no such member in mapping: '([A-Za-z_]\w*)'$", text)
        if named and re.search(rf"\.{named[1]}\b", expr):
            return f"no field {named[1]!r}"
        return "a field it reads is missing"
    if issubclass(cause, TypeError):
        found = re.findall(r"celtypes\.(\w+)Type'", str(error.args[0]) if error.args else "")
        kinds = [_TYPE_WORDS.get(name, name.lower()) for name in found[:2]]
        return f"operands of the wrong type ({', '.join(kinds)})" if kinds else "wrong type"
    if issubclass(cause, ZeroDivisionError):
        return "division by zero"
    if issubclass(cause, IndexError):
        return "list index out of range"
    if issubclass(cause, ValueError):
        return "number out of range or not convertible"
    if issubclass(cause, RecursionError):
        return "params nested too deeply"
    return "evaluation error"


# --- JSON Schema ---------------------------------------------------------------------

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
_SCHEMA_ONES = (
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)


def _without_false(schema: Any) -> Any:
    """The schema with every ``false`` subschema written ``{"not": {}}``: the same meaning,
    but jsonschema 4.26 drops the instance path from errors of a literal ``false``."""
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _without_false(v) for k, v in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_without_false(v) for v in out[key]]
    for key in _SCHEMA_ONES:
        if key in out:
            out[key] = _without_false(out[key])
    return out


def _keyword(schema: Any, keyword: str) -> Iterator[str]:
    """Every string value of ``keyword`` in the schema, skipping literal data."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == keyword and isinstance(value, str):
                yield value
            elif key not in ("const", "enum", "default", "examples"):
                yield from _keyword(value, keyword)
    elif isinstance(schema, list):
        for value in schema:
            yield from _keyword(value, keyword)


def _show(value: Any, limit: int = 80) -> str:
    """A configured value (never a caller's) as text, cut when long."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_TYPE_PHRASES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}

_SIMPLE: dict[str, Callable[[Any], str]] = {
    "enum": lambda v: f"must be one of {_show(v)}",
    "const": lambda v: f"must be {_show(v)}",
    "pattern": lambda v: f"must match pattern {v}",
    "format": lambda v: f"must be a valid {v}",
    "minLength": lambda v: f"must be at least {v} characters long",
    "maxLength": lambda v: f"must be at most {v} characters long",
    "minimum": lambda v: f"must be at least {v}",
    "maximum": lambda v: f"must be at most {v}",
    "exclusiveMinimum": lambda v: f"must be greater than {v}",
    "exclusiveMaximum": lambda v: f"must be less than {v}",
    "multipleOf": lambda v: f"must be a multiple of {v}",
    "minItems": lambda v: f"must have at least {v} items",
    "maxItems": lambda v: f"must have at most {v} items",
    "uniqueItems": lambda v: "must not repeat an item",
    "minProperties": lambda v: f"must have at least {v} fields",
    "maxProperties": lambda v: f"must have at most {v} fields",
    "contains": lambda v: "must contain a matching item",
    "minContains": lambda v: f"must contain at least {v} matching items",
    "maxContains": lambda v: f"must contain at most {v} matching items",
    "anyOf": lambda v: "must match at least one of the allowed forms",
    "oneOf": lambda v: "must match exactly one of the allowed forms",
    "unevaluatedProperties": lambda v: "has fields that are not allowed",
    "unevaluatedItems": lambda v: "has more items than allowed",
}

Path = tuple[str | int, ...]


def _describe(error: jsonschema.ValidationError) -> list[tuple[Path, str]]:
    """One schema error as (path, rule) pairs, phrased without the offending value."""
    path: Path = tuple(error.absolute_path)
    if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
        # The instance is a field name here: name it as the field, not the object.
        inner = _phrase(error, path)
        return [
            (path + (error.instance,), f"is not an allowed field name ({rule})")
            for _, rule in inner
        ]
    return _phrase(error, path)


def _phrase(error: jsonschema.ValidationError, path: Path) -> list[tuple[Path, str]]:
    kind, value, instance = error.validator, error.validator_value, error.instance
    if kind == "type":
        types = value if isinstance(value, list) else [value]
        return [(path, "must be " + " or ".join(_TYPE_PHRASES.get(str(t), str(t)) for t in types))]
    if kind == "required" and isinstance(instance, dict):
        return [(path + (name,), "is required") for name in value if name not in instance]
    if kind == "dependentRequired" and isinstance(instance, dict):
        return [
            (path + (need,), f"is required when {present} is set")
            for present, needs in value.items()
            if present in instance
            for need in needs
            if need not in instance
        ]
    if kind == "not":
        # ``{"not": {}}`` is how ``_without_false`` writes ``false``.
        return [(path, "is not allowed" if value == {} else "must not match the excluded form")]
    if kind in _SIMPLE:
        return [(path, _SIMPLE[kind](value))]
    return [(path, f"does not satisfy {kind}")]


def _path_key(path: Path) -> tuple[tuple[int, int, str], ...]:
    """Sorts list indexes numerically and field names alphabetically."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in path)


# --- ParamRules ----------------------------------------------------------------------


class ParamRules:
    """A channel's compiled parameter constraints. Make one with ``compile``."""

    def __init__(
        self,
        schema: dict[str, Any],
        validator: jsonschema.protocols.Validator | None,
        rules: tuple[Rule, ...],
        programs: tuple[celpy.Runner, ...],
    ) -> None:
        self._schema = schema
        self._validator = validator
        self._rules = rules
        self._programs = programs

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any] | None,
        rules: Sequence[Mapping[str, Any]],
        where: str,
    ) -> ParamRules:
        """Checks the schema and compiles the rules; ``where`` names the channel's table in
        error messages ("channels.sms"). Raises ``ConfigError``."""
        if schema is not None and not isinstance(schema, Mapping):
            raise ConfigError(f"{where}.parameters must be a table (a JSON Schema object)")
        plain = copy.deepcopy(dict(schema)) if schema else {}
        validator = _schema_validator(plain, f"{where}.parameters") if plain else None
        compiled: list[Rule] = []
        programs: list[celpy.Runner] = []
        for i, table in enumerate(rules):
            rule, program = _compile_rule(table, f"{where}.rules[{i}]")
            compiled.append(rule)
            programs.append(program)
        return cls(plain, validator, tuple(compiled), tuple(programs))

    @property
    def schema(self) -> dict[str, Any]:
        """The declared schema ({} when none), for the channel's tool description."""
        return copy.deepcopy(self._schema)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    @property
    def rule_messages(self) -> list[str]:
        """What the rules require, in words, for the channel's tool description."""
        return [rule.message for rule in self._rules]

    def check(
        self,
        params: Mapping[str, Any],
        caller: Mapping[str, Any],
        action: Mapping[str, Any],
    ) -> list[Violation]:
        """Every schema violation (sorted by path, at most 20), or else every failed rule.
        Never raises: a rule that cannot be evaluated is reported as a violation."""
        if self._validator is not None:
            found = self._schema_violations(params)
            if found:
                return found
        if not self._programs:
            return []
        try:
            activation = {
                "params": _to_cel(params),
                "caller": _to_cel(caller),
                "action": _to_cel(action),
            }
        except (TypeError, ValueError, RecursionError) as exc:
            reason = _reason(exc, "")
            return [
                Violation("", f"{r.message} (could not be evaluated: {reason})")
                for r in self._rules
            ]
        violations = []
        for rule, program in zip(self._rules, self._programs, strict=True):
            try:
                result = program.evaluate(activation)
            except Exception as exc:  # a broken rule refuses the action, never crashes
                violations.append(
                    Violation(
                        "", f"{rule.message} (could not be evaluated: {_reason(exc, rule.expr)})"
                    )
                )
                continue
            if not isinstance(result, celtypes.BoolType):
                violations.append(
                    Violation("", f"{rule.message} (could not be evaluated: not true or false)")
                )
            elif not result:
                violations.append(Violation("", rule.message))
        return violations

    def _schema_violations(self, params: Mapping[str, Any]) -> list[Violation]:
        assert self._validator is not None
        found: dict[tuple[Path, str], None] = {}
        try:
            for error in self._validator.iter_errors(params):
                for path, rule in _describe(error):
                    found.setdefault((path, rule))
        except Exception:  # params that are not JSON-like; refused, never a crash
            return [Violation("", "could not be checked against the channel's schema")]
        ordered = sorted(found, key=lambda item: _path_key(item[0]))
        return [
            Violation(".".join(str(p) for p in path), rule)
            for path, rule in ordered[:MAX_SCHEMA_VIOLATIONS]
        ]


def _schema_validator(schema: dict[str, Any], where: str) -> jsonschema.protocols.Validator:
    declared = schema.get("$schema", _DRAFT)
    if not isinstance(declared, str) or declared.rstrip("#") != _DRAFT:
        raise ConfigError(f"{where}: $schema must be {_DRAFT} (Draft 2020-12), got {declared!r}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path)
        raise ConfigError(f"{where}: {exc.message}" + (f" (at {at})" if at else "")) from None
    # An empty registry: a $ref is resolved inside this schema or not at all, never fetched.
    resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
    resolver = referencing.Registry().with_resource("", resource).resolver("")
    for ref in _keyword(schema, "$ref"):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise ConfigError(
                f"{where}: $ref {ref!r} does not resolve within the schema (nothing is fetched)"
            ) from None
    checker = _format_checker()
    for name in _keyword(schema, "format"):
        if name not in checker.checkers:
            # Draft 2020-12 lets a format go unchecked; here an author would expect it to be.
            raise ConfigError(
                f"{where}: format {name!r} cannot be checked; checked formats: "
                f"{', '.join(sorted(checker.checkers))} (use pattern for others)"
            )
    return jsonschema.Draft202012Validator(
        _without_false(schema),
        registry=referencing.Registry(),
        format_checker=checker,
    )


@functools.cache
def _format_checker() -> jsonschema.FormatChecker:
    """A checker for exactly ``CHECKED_FORMATS``, whatever else jsonschema could check."""
    available = jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers
    missing = [name for name in CHECKED_FORMATS if name not in available]
    if missing:
        raise RuntimeError(f"jsonschema cannot check format(s) {', '.join(missing)}")
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {name: available[name] for name in CHECKED_FORMATS}
    return checker


def _compile_rule(table: Any, where: str) -> tuple[Rule, celpy.Runner]:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table with expr and message")
    unknown = sorted(set(table) - _RULE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: expr, message")
    expr, message = table.get("expr"), table.get("message")
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError(f"{where}.expr is required: a CEL expression that must be true")
    if not isinstance(message, str) or not message.strip():
        raise ConfigError(f"{where}.message is required: what a valid action looks like")
    environment = _cel()
    try:
        ast = environment.compile(expr)
    except celpy.CELParseError as exc:
        raise ConfigError(
            f"{where}.expr: not valid CEL (line {exc.line}, column {exc.column})"
        ) from None
    _check_names(ast, f"{where}.expr")
    return Rule(expr, message.strip()), environment.program(ast, functions=_FUNCTIONS)
