"""The metric catalog: one declaration per metric, pooling that follows it, and the page rendered from it."""

from __future__ import annotations

import logging

import pytest

from experiments.measure.catalog import BY_NAME, METRICS, Pool, metric, render_markdown, undeclared
from serving.paths import REPO_ROOT


def test_each_metric_is_declared_once_with_a_unit_and_a_meaning() -> None:
    assert len(BY_NAME) == len(METRICS), "a metric is declared twice"
    assert all(m.unit and m.doc for m in METRICS)
    assert metric("throughput_img_s_ci_low") is BY_NAME["throughput_img_s"]
    assert undeclared(["latency_p99_ms", "made_up_ms"]) == ["made_up_ms"]


def test_the_metrics_page_is_what_the_catalog_renders() -> None:
    page = REPO_ROOT / "docs" / "metrics.md"
    assert page.read_text() == render_markdown(), "run: python -m experiments.measure.catalog > docs/metrics.md"


def test_repeats_pool_as_the_catalog_says(caplog: pytest.LogCaptureFixture) -> None:
    """Each pool kind on two repeats, and an undeclared metric averaged with a warning naming it."""
    from experiments.measure import pooled

    values = {"windows": [3.0, 4.0], "stable": [1.0, 0.0], "overloaded": [0.0, 1.0], "requests_s": [10.0, 40.0],
              "payload_bytes": [100.0, 300.0], "made_up_ms": [1.0, 3.0]}
    expected = {"windows": 7.0, "stable": 0.0, "overloaded": 1.0, "requests_s": 20.0, "payload_bytes": 200.0,
                "made_up_ms": 2.0}
    kinds = {metric(name).pool for name in values if metric(name)}
    assert kinds == {Pool.SUM, Pool.MIN, Pool.MAX, Pool.GEOMETRIC, Pool.MEAN}
    with caplog.at_level(logging.WARNING, logger=pooled.__name__):
        pooled_values = {name: pooled._pool(name, v) for name, v in values.items()}
    assert pooled_values == pytest.approx(expected)
    assert [r.getMessage() for r in caplog.records] == [
        "metric made_up_ms is not declared in experiments/measure/catalog.py: its repeats are averaged"]

