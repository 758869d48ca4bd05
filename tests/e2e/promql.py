"""A parser for the PromQL a dashboard holds: it checks an expression's syntax and names
the metrics it selects, so a dashboard test can compare them with what the components
actually export.

Covers what dashboards use: selectors with label matchers, range selectors and subqueries
(durations or Grafana's ``$__...`` interval variables), ``offset``, function calls,
aggregations with ``by``/``without`` before or after their arguments, binary operators
with ``bool``, ``on``/``ignoring`` and ``group_left``/``group_right``, numbers, strings and
parentheses. Anything else is a ``PromQLError`` saying where.
"""

from __future__ import annotations

import dataclasses
import re

AGGREGATIONS = frozenset(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile".split()
)
FUNCTIONS = frozenset(
    """abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month
    day_of_week day_of_year days_in_month delta deriv exp floor histogram_quantile
    histogram_count histogram_sum holt_winters hour idelta increase irate label_join
    label_replace ln log2 log10 minute month predict_linear rate resets round scalar sgn
    sort sort_desc sqrt time timestamp vector year avg_over_time min_over_time
    max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time
    stdvar_over_time last_over_time present_over_time""".split()
)
BINARY = ("==", "!=", ">=", "<=", ">", "<", "+", "-", "*", "/", "%", "^")
SET_OPERATORS = frozenset({"and", "or", "unless"})
MATCH_OPERATORS = ("=~", "!~", "!=", "=")

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![\w])
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<variable>\$\{?\w+\}?)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<name>[a-zA-Z_:][\w:]*)
    |(?P<op>=~|!~|==|!=|>=|<=|[-+*/%^<>=(){}\[\],:])
    )""",
    re.VERBOSE,
)


class PromQLError(ValueError):
    pass


@dataclasses.dataclass
class _Token:
    kind: str
    text: str
    at: int


def _tokens(expr: str) -> list[_Token]:
    found: list[_Token] = []
    position = 0
    while position < len(expr):
        if expr[position:].strip() == "":
            break
        match = _TOKEN.match(expr, position)
        if match is None or match.end() == position:
            raise PromQLError(f"unexpected character at {position}: {expr[position:][:20]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append(_Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    found.append(_Token("end", "", len(expr)))
    return found


class _Parser:
    def __init__(self, expr: str) -> None:
        self.tokens = _tokens(expr)
        self.index = 0
        self.metrics: set[str] = set()
        self.labels: set[str] = set()

    @property
    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self, text: str | None = None, kind: str | None = None) -> _Token:
        token = self.peek
        if (text is not None and token.text != text) or (kind is not None and token.kind != kind):
            wanted = text or kind
            raise PromQLError(f"expected {wanted!r} at {token.at}, found {token.text!r}")
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek.text == text and self.peek.kind in ("op", "name"):
            self.index += 1
            return True
        return False

    def parse(self) -> None:
        self.expression()
        if self.peek.kind != "end":
            raise PromQLError(f"unexpected {self.peek.text!r} at {self.peek.at}")

    def expression(self) -> None:
        self.unary()
        while True:
            token = self.peek
            if (token.kind == "op" and token.text in BINARY) or (
                token.kind == "name" and token.text in SET_OPERATORS
            ):
                self.index += 1
                self.accept("bool")
                self.vector_matching()
                self.unary()
            else:
                return

    def vector_matching(self) -> None:
        if self.peek.text in ("on", "ignoring"):
            self.index += 1
            self.label_list()
            if self.peek.text in ("group_left", "group_right"):
                self.index += 1
                if self.peek.text == "(":
                    self.label_list()

    def unary(self) -> None:
        while self.peek.text in ("-", "+") and self.peek.kind == "op":
            self.index += 1
        self.postfix()

    def postfix(self) -> None:
        self.primary()
        if self.accept("["):
            self.duration()
            if self.accept(":"):
                if self.peek.text != "]":
                    self.duration()
            self.take("]")
        if self.accept("offset"):
            self.accept("-")
            self.duration()

    def duration(self) -> None:
        token = self.peek
        if token.kind not in ("duration", "variable"):
            raise PromQLError(f"expected a duration at {token.at}, found {token.text!r}")
        self.index += 1

    def primary(self) -> None:
        token = self.peek
        if token.kind in ("number", "string"):
            self.index += 1
        elif token.text == "(" and token.kind == "op":
            self.index += 1
            self.expression()
            self.take(")")
        elif token.kind == "name" and token.text in AGGREGATIONS:
            self.aggregation()
        elif token.kind == "name" and self.tokens[self.index + 1].text == "(":
            if token.text not in FUNCTIONS:
                raise PromQLError(f"unknown function {token.text!r} at {token.at}")
            self.index += 1
            self.arguments()
        elif token.kind == "name" or token.text == "{":
            self.selector()
        else:
            raise PromQLError(f"unexpected {token.text!r} at {token.at}")

    def aggregation(self) -> None:
        self.index += 1
        grouped = self.grouping()
        self.arguments()
        if not grouped:
            self.grouping()

    def grouping(self) -> bool:
        if self.peek.text in ("by", "without") and self.peek.kind == "name":
            self.index += 1
            self.label_list()
            return True
        return False

    def label_list(self) -> None:
        self.take("(")
        while self.peek.text != ")":
            self.labels.add(self.take(kind="name").text)
            if not self.accept(","):
                break
        self.take(")")

    def arguments(self) -> None:
        self.take("(")
        while self.peek.text != ")":
            self.expression()
            if not self.accept(","):
                break
        self.take(")")

    def selector(self) -> None:
        name = None
        if self.peek.kind == "name":
            name = self.take().text
        if self.accept("{"):
            while self.peek.text != "}":
                label = self.take(kind="name").text
                operator = self.peek
                if operator.text not in MATCH_OPERATORS:
                    raise PromQLError(f"expected a label matcher at {operator.at}")
                self.index += 1
                value = self.take(kind="string").text[1:-1]
                if label == "__name__":
                    name = value
                else:
                    self.labels.add(label)
                if not self.accept(","):
                    break
            self.take("}")
        if name is None:
            raise PromQLError("a selector needs a metric name")
        self.metrics.add(name)


@dataclasses.dataclass(frozen=True)
class Parsed:
    metrics: frozenset[str]
    labels: frozenset[str]  # named in matchers and in by/without/on/ignoring lists


def parse(expr: str) -> Parsed:
    """Checks ``expr``; returns the metric names it selects and the labels it names."""
    parser = _Parser(expr)
    parser.parse()
    return Parsed(frozenset(parser.metrics), frozenset(parser.labels))
