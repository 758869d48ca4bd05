"""The PromQL parser the dashboard test relies on (tests/e2e/promql.py): it must name every
metric an expression selects and refuse what Prometheus would refuse, or a broken
dashboard would pass."""

from __future__ import annotations

import pytest

from tests.e2e.promql import PromQLError, parse


def test_names_the_metrics_of_a_quantile_over_a_ratio() -> None:
    parsed = parse(
        'histogram_quantile(0.99, sum by (service, le) (rate(a_bucket{code!="OK"}[5m])))'
        " / on (service) group_left sum without (x) (b_total[$__rate_interval] offset 1h)"
        ' and {__name__="c"}'
    )
    assert parsed.metrics == {"a_bucket", "b_total", "c"}
    assert parsed.labels == {"service", "le", "code", "x"}


@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(x[5m])",  # unbalanced
        "rate(x[5])",  # a duration needs a unit
        "ratee(x[5m])",  # no such function
        'x{code~"OK"}',  # no such matcher
        "sum by (a (x)",
        "x +",
        '{code="OK"}',  # no metric name
        "x y",
    ],
)
def test_refuses_broken_expressions(expr: str) -> None:
    with pytest.raises(PromQLError):
        parse(expr)
