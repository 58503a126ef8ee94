"""A metric's declaration: its MLflow name, its unit, how the repeats of a trial pool it, what it means. The engine's
catalog (`experiments.measure.catalog`) holds every declaration; a workload declares its own figures beside the code
that computes them (`serving/workloads/<name>/`), and the catalog takes them from the workload registry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PERCENTILES = (50, 90, 95, 99)


class Pool(StrEnum):
    """How a trial's repeats become its one figure (docs/confidence-intervals.md)."""

    SAMPLES = "samples"  # computed again from every repeat's raw samples pooled (never averaged)
    GEOMETRIC = "geometric"  # a rate: the repeats' geometric mean (the centre of its interval)
    PRICED = "priced"  # computed again from the pooled throughput and the tier's price
    SUM = "sum"  # a count over the repeats
    MIN = "min"  # a flag or a floor: the worst repeat's (a caveat of one repeat is the trial's)
    MAX = "max"  # a worst case: the worst repeat's
    MEAN = "mean"  # the repeats' mean


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # ms, s, img/s, tok/s, req/s, share (0-1), %, cores, bytes, USD, W, J, MB, count, flag, ratio, batch
    pool: Pool
    doc: str


def family(pattern: str, values: tuple, unit: str, pool: Pool, doc: str) -> list[Metric]:
    """One metric per value, `pattern` and `doc` formatted with it (`latency_p{}_ms` over the percentiles)."""
    return [Metric(pattern.format(v), unit, pool, doc.format(v)) for v in values]


def cost_per(usd_per_hour, rate_per_s, quantity: float):
    """What `quantity` units cost at `usd_per_hour` serving `rate_per_s` units a second: $ per 1k images, per 1M
    tokens. Numbers or pandas Series alike."""
    return usd_per_hour / 3600.0 / rate_per_s * quantity
