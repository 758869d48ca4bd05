"""A reach channel's declared parameter constraints: JSON Schema first, then CEL rules."""

from __future__ import annotations

import subprocess
import sys
import time
import types
from typing import Any

import jsonschema
import pytest

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.reach import constraints
from reachstore_server.reach.constraints import ParamRules, Rule, Violation

CALLER = {"tenant": "acme", "key_id": "k1", "groups": ["sales", "ops"]}
ACTION = {"type": "sms.send", "entity_id": "order-7"}


def rules(*exprs: str, schema: dict[str, Any] | None = None) -> ParamRules:
    """Rules whose message is their expression, so a violation names the rule."""
    return ParamRules.compile(schema, [{"expr": e, "message": e} for e in exprs], "channels.t")


def failed(compiled: ParamRules, params: dict[str, Any], caller: Any = CALLER) -> list[str]:
    return [v.rule for v in compiled.check(params, caller, ACTION)]


# --- compile -------------------------------------------------------------------------


def test_compile_keeps_schema_and_messages_for_the_tool_description() -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}}
    compiled = ParamRules.compile(
        schema,
        [{"expr": "size(params.to) <= 20", "message": "  at most 20 characters "}],
        "channels.sms",
    )
    assert compiled.schema == schema
    assert compiled.rule_messages == ["at most 20 characters"]
    assert compiled.rules == (Rule("size(params.to) <= 20", "at most 20 characters"),)
    compiled.schema["type"] = "array"  # a copy: the compiled rules do not change
    schema["type"] = "array"
    assert compiled.schema["type"] == "object"


def test_no_schema_and_no_rules_accepts_anything() -> None:
    compiled = ParamRules.compile(None, [], "channels.t")
    assert compiled.schema == {}
    assert compiled.rule_messages == []
    assert compiled.check({"anything": [1.0, {"x": None}]}, CALLER, ACTION) == []


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "strng"}, "channels.sms.parameters: "),
        ({"properties": {"a": {"pattern": "("}}}, "channels.sms.parameters: "),
        ({"maxItems": -1}, "channels.sms.parameters: "),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "Draft 2020-12"),
        ({"$ref": "https://example.com/schema.json"}, "does not resolve"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
        ({"properties": {"a": {"format": "date-time"}}}, "format 'date-time' cannot be checked"),
        ({"$schema": 7}, "Draft 2020-12"),
    ],
)
def test_a_bad_schema_is_a_config_error_naming_the_channel(
    schema: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ParamRules.compile(schema, [], "channels.sms")
    assert str(caught.value).startswith("channels.sms.parameters: ")
    assert expected in str(caught.value)


def test_checked_formats_do_not_depend_on_what_jsonschema_could_check() -> None:
    # The test extras bring rfc3339-validator, with which jsonschema could check date-time
    # and time; a channel file must still load, or not, the same in every environment.
    assert "date-time" in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers
    for name in ("date-time", "time"):
        schema = {"properties": {"a": {"type": "string", "format": name}}}
        with pytest.raises(ConfigError) as caught:
            ParamRules.compile(schema, [], "channels.sms")
        assert f"checked formats: {', '.join(sorted(constraints.CHECKED_FORMATS))} " in str(
            caught.value
        )
    for name in constraints.CHECKED_FORMATS:
        ParamRules.compile({"properties": {"a": {"format": name}}}, [], "channels.sms")
    compiled = ParamRules.compile(
        {"properties": {"d": {"type": "string", "format": "date"}}}, [], "channels.sms"
    )
    assert compiled.check({"d": "2024-13-40"}, CALLER, ACTION) == [
        Violation("d", "must be a valid date")
    ]


def test_a_schema_that_is_not_a_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^channels\.sms\.parameters must be a table"):
        ParamRules.compile("object", [], "channels.sms")  # type: ignore[arg-type]


def test_a_property_named_format_is_not_a_format() -> None:
    schema = {"properties": {"format": {"enum": ["text", "html"]}}}
    compiled = ParamRules.compile(schema, [], "channels.t")
    assert compiled.check({"format": "pdf"}, CALLER, ACTION) == [
        Violation("format", 'must be one of ["text", "html"]')
    ]


def test_local_refs_and_the_declared_draft_are_accepted() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {"name": {"type": "string", "maxLength": 3}},
        "properties": {"a": {"$ref": "#/$defs/name"}},
    }
    compiled = ParamRules.compile(schema, [], "channels.t")
    assert compiled.check({"a": "abcd"}, CALLER, ACTION) == [
        Violation("a", "must be at most 3 characters long")
    ]


def test_a_cel_syntax_error_names_the_rule_and_the_position() -> None:
    table = [{"expr": "true", "message": "ok"}, {"expr": "params.count <=", "message": "m"}]
    with pytest.raises(ConfigError, match=r"^channels\.t\.rules\[1\]\.expr: .*line 1, column"):
        ParamRules.compile(None, table, "channels.t")


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"expr": "true", "message": "m", "severity": "high"}, r"rules\[0\]: unknown key"),
        ({"expr": "true"}, r"rules\[0\]\.message is required"),
        ({"expr": "true", "message": "  "}, r"rules\[0\]\.message is required"),
        ({"message": "m"}, r"rules\[0\]\.expr is required"),
        ({"expr": 3, "message": "m"}, r"rules\[0\]\.expr is required"),
        ("params.x > 1", r"rules\[0\] must be a table"),
        ({"expr": "lenght(params.x) < 3", "message": "m"}, "unknown function 'lenght'"),
        ({"expr": "params.x.lenght() < 3", "message": "m"}, "unknown function 'lenght'"),
        ({"expr": "param.count <= 20", "message": "m"}, "unknown name 'param'"),
    ],
)
def test_a_bad_rule_table_is_a_config_error(table: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        ParamRules.compile(None, [table], "channels.t")


def test_comprehension_variables_macros_and_type_names_compile() -> None:
    compiled = rules(
        "params.items.all(item, item.qty > 0)",
        "params.items.exists(i, i.qty > 2) && params.items.exists_one(x, x.qty == 3)",
        "params.items.map(i, i.qty).filter(q, q > 1).size() == 1",
        "has(params.note) && type(params.note) == string && dyn(params.note) != ''",
        "params.note.startsWith('a') && params.note.matches('^a+$')",
    )
    assert failed(compiled, {"items": [{"qty": 1.0}, {"qty": 3.0}], "note": "aa"}) == []


def test_compiling_keeps_a_recursion_limit_raised_by_someone_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = sys.getrecursionlimit()
    monkeypatch.setattr(constraints, "_environment", None)
    try:
        sys.setrecursionlimit(5000)
        rules("params.a == 1")
        assert sys.getrecursionlimit() == 5000
    finally:
        sys.setrecursionlimit(before)


# --- schema --------------------------------------------------------------------------

SMS = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "pattern": "^1[3-9][0-9]{9}$"},
        "group": {"type": "string"},
        "count": {"type": "integer", "minimum": 1, "maximum": 100},
        "kind": {"enum": ["text", "template"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 8}},
                "required": ["name"],
            },
        },
        "reply_to": {"type": "string", "format": "email"},
        "legacy": False,
    },
    "required": ["to", "group"],
    "additionalProperties": False,
}


def test_schema_violations_name_the_field_and_what_is_valid() -> None:
    compiled = ParamRules.compile(SMS, [{"expr": "false", "message": "never"}], "channels.t")
    found = compiled.check(
        {
            "to": "12345",
            "count": 0.0,
            "kind": "voice",
            "items": [{"name": "ok"}, {}, {"name": "much too long"}],
            "reply_to": "not an address",
            "legacy": True,
            "extra": 1.0,
        },
        CALLER,
        ACTION,
    )
    assert found == [
        Violation("count", "must be at least 1"),
        Violation("extra", "is not allowed"),
        Violation("group", "is required"),
        Violation("items.1.name", "is required"),
        Violation("items.2.name", "must be at most 8 characters long"),
        Violation("kind", 'must be one of ["text", "template"]'),
        Violation("legacy", "is not allowed"),
        Violation("reply_to", "must be a valid email"),
        Violation("to", "must match pattern ^1[3-9][0-9]{9}$"),
    ]  # sorted by path, and the rule did not run


def test_schema_messages_do_not_repeat_the_value() -> None:
    compiled = ParamRules.compile(SMS, [], "channels.t")
    secret = "zhang.san@example.com"
    found = compiled.check({"to": secret, "group": secret, "kind": secret}, CALLER, ACTION)
    assert {v.field for v in found} == {"to", "kind"}
    assert not any(secret in v.rule or "zhang" in v.rule for v in found)


def test_a_whole_float_satisfies_an_integer_schema() -> None:
    compiled = ParamRules.compile(SMS, [], "channels.t")
    assert compiled.check({"to": "13800138000", "group": "g", "count": 3.0}, CALLER, ACTION) == []
    assert compiled.check({"to": "13800138000", "group": "g", "count": 3.5}, CALLER, ACTION) == [
        Violation("count", "must be an integer")
    ]


def test_at_most_twenty_schema_violations_sorted_numerically() -> None:
    schema = {"type": "object", "properties": {"items": {"items": {"type": "string"}}}}
    found = ParamRules.compile(schema, [], "channels.t").check(
        {"items": [float(i) for i in range(30)]}, CALLER, ACTION
    )
    assert found == [Violation(f"items.{i}", "must be a string") for i in range(20)]


SHORT_NAMES = "must be at most 3 characters long"


@pytest.mark.parametrize(
    ("schema", "params", "expected"),
    [
        ({"type": ["string", "null"]}, {"x": 1.0}, [Violation("x", "must be a string or null")]),
        ({"const": "a"}, {"x": "b"}, [Violation("x", 'must be "a"')]),
        ({"exclusiveMaximum": 5}, {"x": 5.0}, [Violation("x", "must be less than 5")]),
        ({"multipleOf": 10}, {"x": 15.0}, [Violation("x", "must be a multiple of 10")]),
        ({"maxItems": 2}, {"x": [1.0, 2.0, 3.0]}, [Violation("x", "must have at most 2 items")]),
        ({"uniqueItems": True}, {"x": ["a", "a"]}, [Violation("x", "must not repeat an item")]),
        (
            {"oneOf": [{"type": "string"}, {"type": "number"}]},
            {"x": True},
            [Violation("x", "must match exactly one of the allowed forms")],
        ),
        (
            {"propertyNames": {"maxLength": 3}},
            {"x": {"ok": 1.0, "too_long": 2.0}},
            [Violation("x.too_long", f"is not an allowed field name ({SHORT_NAMES})")],
        ),
        (
            {"dependentRequired": {"cc": ["subject"]}},
            {"x": {"cc": "a"}},
            [Violation("x.subject", "is required when cc is set")],
        ),
    ],
)
def test_schema_keyword_messages(
    schema: dict[str, Any], params: dict[str, Any], expected: list[Violation]
) -> None:
    wrapped = {"type": "object", "properties": {"x": schema}}
    assert ParamRules.compile(wrapped, [], "channels.t").check(params, CALLER, ACTION) == expected


def test_a_root_level_violation_has_an_empty_field() -> None:
    compiled = ParamRules.compile({"type": "object", "maxProperties": 1}, [], "channels.t")
    assert compiled.check({"a": 1.0, "b": 2.0}, CALLER, ACTION) == [
        Violation("", "must have at most 1 fields")
    ]


# --- rules: numbers as they arrive from a protobuf Struct -----------------------------


def test_size_of_a_list_against_an_int_literal() -> None:
    compiled = rules("size(params.items) <= 20")
    assert failed(compiled, {"items": [float(i) for i in range(20)]}) == []
    assert failed(compiled, {"items": [float(i) for i in range(21)]}) == [
        "size(params.items) <= 20"
    ]


@pytest.mark.parametrize(("count", "ok"), [(20.0, True), (1.0, True), (21.0, False), (20.5, False)])
def test_a_struct_double_against_an_int_literal(count: float, ok: bool) -> None:
    assert failed(rules("params.count <= 20"), {"count": count}) == (
        [] if ok else ["params.count <= 20"]
    )


def test_membership_in_the_callers_groups() -> None:
    compiled = rules("params.group in caller.groups")
    assert failed(compiled, {"group": "ops"}) == []
    assert failed(compiled, {"group": "finance"}) == ["params.group in caller.groups"]
    assert failed(compiled, {"group": "ops"}, caller={**CALLER, "groups": []}) == [
        "params.group in caller.groups"
    ]


@pytest.mark.parametrize(
    "expr",
    [
        "params.count == 3",
        "params.count != 4",
        "3 == params.count",
        "20 >= params.count && 2 < params.count && params.count > 2u",
        "params.count == 3.0",
        "3 in params.items",
        "params.items == [1, 2, 3]",
        "{'n': params.count} == {'n': 3}",
        "size(params.items) <= params.limit",
        "size(params.items) == params.count",
        "params.count + 1 == 4 && 1 + params.count == 4",
        "params.count * 2 == 6 && 2 * params.count == 6 && 10 - params.count == 7",
        "params.price * 1.1 <= 100",
        "params.count / 2 == 1.5",
        "int(params.count) % 3 == 0",
        "params.items[0] == 1 && params.items[int(params.count) - 1] == 3",
        "double(size(params.items)) == params.count",
    ],
)
def test_int_literals_and_struct_doubles_mix_as_an_author_expects(expr: str) -> None:
    params = {"count": 3.0, "items": [1.0, 2.0, 3.0], "limit": 3.0, "price": 90.0}
    assert failed(rules(expr), params) == []


def test_params_given_as_ints_behave_the_same() -> None:
    compiled = rules("params.count <= 20", "params.count == 3", "params.price * 1.1 <= 100")
    assert failed(compiled, {"count": 3, "price": 90}) == []


def test_mixed_arithmetic_does_not_depend_on_whether_a_value_is_whole() -> None:
    compiled = rules("params.price * 1.1 <= 100")
    assert failed(compiled, {"price": 90.0}) == []
    assert failed(compiled, {"price": 90.5}) == []
    assert failed(compiled, {"price": 91.0}) == ["params.price * 1.1 <= 100"]
    assert failed(rules("params.a / params.b == 3.5"), {"a": 7.0, "b": 2.0}) == []


def test_values_of_different_types_are_unequal_not_an_error() -> None:
    compiled = rules("params.group == 3")
    assert failed(compiled, {"group": "3"}) == ["params.group == 3"]
    assert failed(rules("true == 1"), {}) == ["true == 1"]


def test_modulo_of_a_struct_double_needs_int() -> None:
    [only] = failed(rules("params.count % 2 == 0"), {"count": 4.0})
    assert only.startswith("params.count % 2 == 0 (could not be evaluated: ")


def test_caller_and_action_are_visible_to_rules() -> None:
    compiled = rules("caller.tenant == 'acme' && action.type.startsWith('sms.')")
    assert failed(compiled, {}) == []


def test_optional_fields_with_has() -> None:
    compiled = rules("!has(params.cc) || size(params.cc) <= 2")
    assert failed(compiled, {}) == []
    assert failed(compiled, {"cc": ["a", "b", "c"]}) == ["!has(params.cc) || size(params.cc) <= 2"]


def test_rules_run_only_after_the_schema_passes() -> None:
    schema = {"type": "object", "properties": {"items": {"maxItems": 20}}}
    compiled = rules("params.items.all(i, i.name != '')", schema=schema)
    assert compiled.check({"items": [1.0] * 21}, CALLER, ACTION) == [
        Violation("items", "must have at most 20 items")
    ]


def test_every_failed_rule_is_reported_with_its_message() -> None:
    table = [
        {"expr": "size(params.items) <= 2", "message": "at most 2 items"},
        {"expr": "params.group in caller.groups", "message": "group must be one of yours"},
        {"expr": "true", "message": "never shown"},
    ]
    compiled = ParamRules.compile(None, table, "channels.t")
    assert compiled.check({"items": [1.0, 2.0, 3.0], "group": "x"}, CALLER, ACTION) == [
        Violation("", "at most 2 items"),
        Violation("", "group must be one of yours"),
    ]


# --- rules that cannot be evaluated ---------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "params", "reason"),
    [
        ("params.missing > 1", {}, "no field 'missing'"),
        ("params.to > 3", {"to": "13800138000"}, "operands of the wrong type (string, int)"),
        ("size(params.items) / 0 > 1", {"items": []}, "division by zero"),
        ("params.items[5] == 1", {"items": [1.0]}, "list index out of range"),
        ("int(params.to) > 1", {"to": "not a number"}, "number out of range or not convertible"),
        ("params.count", {"count": 1.0}, "not true or false"),
        ("size(params.count) > 1", {"count": 1.0}, "could not be evaluated"),
    ],
)
def test_a_rule_that_cannot_be_evaluated_is_a_violation(
    expr: str, params: dict[str, Any], reason: str
) -> None:
    [violation] = rules(expr).check(params, CALLER, ACTION)
    assert violation.field == ""
    assert violation.rule.startswith(f"{expr} (could not be evaluated: ")
    assert reason in violation.rule


def test_an_evaluation_error_never_quotes_the_params() -> None:
    table = [
        {"expr": "params.to > 3", "message": "m"},
        {"expr": "params.by_mail[params.to] == 1", "message": "m"},
        {"expr": "params.to in params.by_mail", "message": "m"},
    ]
    compiled = ParamRules.compile(None, table, "channels.t")
    found = compiled.check({"to": "zhang.san@example.com", "by_mail": {}}, CALLER, ACTION)
    assert [v.rule.partition(" (")[0] for v in found] == ["m", "m", "m"]  # the last: false
    assert not any("zhang" in v.rule or "example" in v.rule for v in found)


def test_check_never_raises_on_odd_inputs() -> None:
    compiled = rules("params.a == 1", "caller.groups.size() > 0")
    nested: dict[str, Any] = {}
    deepest = nested
    for _ in range(5000):
        deepest["a"] = {}
        deepest = deepest["a"]
    odd: list[tuple[Any, Any]] = [
        ({"a": object()}, CALLER),
        (nested, CALLER),
        ({"a": 1.0}, {"groups": object()}),
        (types.MappingProxyType({"a": 1.0}), {"groups": ("x",)}),
    ]
    for params, caller in odd:
        found = compiled.check(params, caller, ACTION)
        assert all(isinstance(v, Violation) for v in found)
    assert compiled.check(types.MappingProxyType({"a": 1.0}), {"groups": ("x",)}, ACTION) == []
    with_schema = ParamRules.compile({"properties": {"a": {"pattern": "^x"}}}, [], "channels.t")
    assert all(isinstance(v, Violation) for v in with_schema.check({"a": object()}, {}, {}))


# --- cost and warnings ---------------------------------------------------------------


def test_rules_over_a_ten_thousand_item_list_end() -> None:
    compiled = rules("size(params.items) <= 20", "params.items.all(i, i.qty >= 0)")
    params = {"items": [{"name": f"n{i}", "qty": float(i)} for i in range(10_000)]}
    started = time.perf_counter()
    assert failed(compiled, params) == ["size(params.items) <= 20"]
    # A hang guard, not a speed target: linear evaluation takes about 0.5 s here; one
    # that went quadratic in the list would run for minutes.
    assert time.perf_counter() - started < 30.0


def test_importing_and_using_celpy_raises_no_warning() -> None:
    code = (
        "from reachstore_server.reach.constraints import ParamRules\n"
        "r = ParamRules.compile({'type': 'object'}, [{'expr': 'params.n <= 2', 'message': 'm'}],"
        " 'w')\n"
        "assert r.check({'n': 3.0}, {}, {})[0].rule == 'm'\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
