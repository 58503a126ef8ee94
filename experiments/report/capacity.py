"""The capacity plan as numbers: how many nodes of each tier serve a traffic within the p99 target, and what they cost.

A node's capacity at an operating point is what the SLO search's highest load within the target served (`run_level=slo`
runs): its goodput where the search had a deadline (`slo_max_goodput_img_s`), else its throughput
(`slo_max_throughput_img_s`): nodes = ⌈peak × (1 + headroom) ÷ capacity⌉, exactly (decimals as fractions, so a
peak that fills its nodes to the image needs no extra node). Mixed plans pair two tiers, each at its best point and
primary price, by trying every node count of one tier and the fewest nodes of the other that cover the rest. Where
the search's probes were measured several times (`experiment.repeats`), the per-node throughput has a 95 % interval
and each plan the node counts at its two ends: fewer nodes at the high end, more at the low end, and the $/month
between. An endpoint's search measured the nodes behind its URL together (`nodes`): one node's capacity is their
throughput ÷ their count, as if its load balancer gave each node an equal share. The section that shows all this is
`experiments.report.capacity_section`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import pandas as pd

from experiments.config.capacity import Traffic, exact
from experiments.config.prices import HOURS_PER_MONTH, PRIMARY, Price
from experiments.measure.intervals import Interval, metric_names
from experiments.report.data import nodes

THROUGHPUT = "slo_max_throughput_img_s"
GOODPUT = "slo_max_goodput_img_s"  # where the search had a deadline: the images answered well in time


@dataclass(frozen=True)
class Point:
    """An operating point searched within the target: what one node of its tier serves there."""

    tier: str
    stack: str  # variant/protocol/input_format
    batch_size: int
    img_s: float  # what one node serves within the p99 target: goodput where there was a deadline, else throughput
    limited: bool = False  # the search stopped at its load limit still within the target: at least img_s
    unstable: bool = False  # the measurement at that load never agreed within the stability rule
    img_s_interval: Interval | None = None  # img_s's 95 % interval (experiment.repeats > 1); None: measured once
    # The nodes the search measured together (an endpoint's replicas behind its URL): img_s is their throughput ÷ this
    measured_nodes: int = 1

    @property
    def requests_s(self) -> float:
        """The same throughput in requests of `batch_size` images."""
        return self.img_s / self.batch_size

    def name(self, labels: dict[str, str]) -> str:
        return f"{labels.get(self.tier, self.tier)} · {self.stack} · b{self.batch_size}"


@dataclass(frozen=True)
class Plan:
    """`nodes` nodes of one operating point, paid at one price (0 nodes: the tier is not used)."""

    point: Point
    price: Price
    nodes: int
    # The node counts at the high and the low end of the point's throughput interval (fewest, most); None: no interval.
    nodes_range: tuple[int, int] | None = None

    @property
    def usd_per_month_range(self) -> Interval | None:
        """$/month at the node counts of the throughput interval's ends: the plan's cost within noise."""
        if self.nodes_range is None:
            return None
        monthly = exact(self.price.usd_per_hour) * HOURS_PER_MONTH
        return Interval(float(self.nodes_range[0] * monthly), float(self.nodes_range[1] * monthly))

    @property
    def usd_per_hour(self) -> Fraction:
        return self.nodes * exact(self.price.usd_per_hour)

    @property
    def usd_per_month(self) -> Fraction:
        return self.usd_per_hour * HOURS_PER_MONTH

    @property
    def capacity_img_s(self) -> Fraction:
        return self.nodes * exact(self.point.img_s)


@dataclass(frozen=True)
class Mix:
    """The cheapest way to cover the required rate with nodes of two tiers (either count may be 0)."""

    first: Plan
    second: Plan
    alone: tuple[Plan, Plan]  # each tier alone, for comparison

    @property
    def usd_per_hour(self) -> Fraction:
        return self.first.usd_per_hour + self.second.usd_per_hour

    @property
    def capacity_img_s(self) -> Fraction:
        return self.first.capacity_img_s + self.second.capacity_img_s

    @property
    def best_alone(self) -> Plan:
        return min(self.alone, key=lambda plan: (plan.usd_per_hour, plan.nodes))

    @property
    def wins(self) -> bool:
        """Both tiers used and strictly cheaper than the cheaper tier alone."""
        return self.first.nodes > 0 and self.second.nodes > 0 and self.usd_per_hour < self.best_alone.usd_per_hour


@dataclass(frozen=True)
class Crossover:
    """Above `traffic_img_s` of peak traffic, `cheaper` costs less per month than `before` did just below it."""

    traffic_img_s: Fraction
    before: str
    cheaper: str


def slo_targets(slo: pd.DataFrame) -> list[float]:
    """The p99 targets the sweep's SLO searches used, tightest first."""
    if slo.empty:
        return []
    return sorted({float(t) for t in slo["slo_p99_ms"].dropna()})


def operating_points(slo: pd.DataFrame, target_ms: float) -> list[Point]:
    """The points whose SLO search at `target_ms` found a load within it (status ok, throughput > 0)."""
    if slo.empty:
        return []
    at = slo[slo["slo_p99_ms"].map(lambda t: math.isclose(float(t), target_ms)) & (slo["slo_met"] == 1)
             & (slo["status"].fillna("ok") == "ok") & (slo[THROUGHPUT] > 0)]
    return [Point(str(r.tier), f"{r.variant}/{r.protocol}/{r.input_format}", int(r.batch_size),
                  capacity(r) / int(nodes(r)), limited=bool(r["slo_limited"] == 1),
                  unstable=bool(r.get("slo_stable_at_max") == 0), img_s_interval=_interval(r),
                  measured_nodes=int(nodes(r)))
            for _, r in at.sort_values(["tier", "variant", "protocol", "input_format"]).iterrows()]


def capacity(row: pd.Series) -> float:
    """What the highest load within the target served: its goodput where the search had a deadline (images answered
    well in time; requests shed or late are not capacity), else its throughput."""
    goodput = row.get(GOODPUT)
    return float(goodput) if goodput is not None and pd.notna(goodput) and goodput > 0 else float(row[THROUGHPUT])


def _interval(row: pd.Series) -> Interval | None:
    """The per-node capacity's interval: the search's throughput interval (scaled to its goodput where that is the
    capacity), ÷ the nodes it measured together."""
    low, high = (row.get(name) for name in metric_names(THROUGHPUT))
    if low is None or high is None or pd.isna(low) or pd.isna(high) or float(low) <= 0:
        return None
    scale = capacity(row) / float(row[THROUGHPUT]) / int(nodes(row))
    return Interval(float(low) * scale, float(high) * scale)


def nodes_needed(required_img_s: Fraction, per_node_img_s: float) -> int:
    """The fewest nodes whose capacity reaches `required_img_s` (which already carries the headroom)."""
    return math.ceil(required_img_s / exact(per_node_img_s))


def sized(point: Point, price: Price, required_img_s: Fraction) -> Plan:
    """`point`'s nodes for `required_img_s` at `price`, with the node counts at its throughput interval's ends."""
    spread = point.img_s_interval
    counts = None if spread is None else (nodes_needed(required_img_s, spread.high),
                                          nodes_needed(required_img_s, spread.low))
    return Plan(point, price, nodes_needed(required_img_s, point.img_s), counts)


def single_plans(points: list[Point], prices: dict[str, list[Price]], traffic: Traffic) -> list[Plan]:
    """Every point at every price of its tier, sized for the traffic; cheapest first (then fewer nodes)."""
    required = traffic.required_img_s
    plans = [sized(point, price, required) for point in points for price in prices.get(point.tier, [])]
    return sorted(plans, key=lambda p: (p.usd_per_hour, p.nodes, p.point.tier, p.point.stack, p.point.batch_size))


def tier_rivals(plans: list[Plan]) -> tuple[Plan, Plan] | None:
    """The cheapest plan (`plans` cheapest first) and the cheapest of another tier: the two whose $/month ranges the
    noise verdict compares. None when the plans are of one tier."""
    if not plans:
        return None
    rival = next((plan for plan in plans if plan.point.tier != plans[0].point.tier), None)
    return None if rival is None else (plans[0], rival)


def best_points(points: list[Point]) -> dict[str, Point]:
    """Per tier, the point with the most img/s per node (stable ones first): at one price per node, its plan is the
    tier's cheapest at any traffic."""
    best: dict[str, Point] = {}
    for point in sorted(points, key=lambda p: (p.unstable, -p.img_s, p.stack, p.batch_size)):
        best.setdefault(point.tier, point)
    return best


def primary(prices: list[Price]) -> Price | None:
    return next((p for p in prices if p.name == PRIMARY), None)


def cheapest_mix(a: Point, price_a: Price, b: Point, price_b: Price, required_img_s: Fraction) -> Mix:
    """Try every count of `a` from 0 to what covers alone, each with the fewest `b` that cover the rest; the
    cheapest wins, then the one with fewer nodes, then a single tier (simpler to run)."""
    alone = (Plan(a, price_a, nodes_needed(required_img_s, a.img_s)),
             Plan(b, price_b, nodes_needed(required_img_s, b.img_s)))
    options = []
    for n_a in range(alone[0].nodes + 1):
        rest = required_img_s - n_a * exact(a.img_s)
        n_b = max(0, math.ceil(rest / exact(b.img_s)))
        options.append(Mix(Plan(a, price_a, n_a), Plan(b, price_b, n_b), alone))
    return min(options, key=lambda m: (m.usd_per_hour, m.first.nodes + m.second.nodes,
                                       m.first.nodes > 0 and m.second.nodes > 0))


def mixed_plans(points: list[Point], prices: dict[str, list[Price]], traffic: Traffic) -> list[Mix]:
    """Per pair of tiers, at their primary prices, the cheapest mix of their best points; cheapest first."""
    best = {tier: point for tier, point in best_points(points).items() if primary(prices.get(tier, []))}
    mixes = [cheapest_mix(best[a], primary(prices[a]), best[b], primary(prices[b]), traffic.required_img_s)
             for a, b in combinations(sorted(best), 2)]
    return sorted(mixes, key=lambda m: (m.usd_per_hour, m.first.point.tier, m.second.point.tier))


def cost_steps(point: Point, price: Price, headroom: float, up_to_img_s: float) -> list[tuple[Fraction, Fraction]]:
    """$/month against peak traffic as steps: (x_k, cost_k) means k nodes, cost_k, for a peak in (x_(k-1), x_k],
    x_k = k × img/s per node ÷ (1 + headroom); up to the first step reaching `up_to_img_s`."""
    per_node = exact(point.img_s) / (1 + exact(headroom))
    monthly = exact(price.usd_per_hour) * HOURS_PER_MONTH
    last = max(1, math.ceil(exact(up_to_img_s) / per_node))
    return [(k * per_node, k * monthly) for k in range(1, last + 1)]


def crossovers(steps: dict[str, list[tuple[Fraction, Fraction]]]) -> list[Crossover]:
    """Where the cheapest curve changes, from 0 to the end of the shortest curve: every step edge of every curve
    splits the traffic axis, and on each piece each curve is one step (a tie keeps the tier that led)."""
    if len(steps) < 2:
        return []
    end = min(curve[-1][0] for curve in steps.values())
    edges = sorted({x for curve in steps.values() for x, _ in curve if x <= end})
    found: list[Crossover] = []
    leader, left = None, Fraction(0)
    for right in edges:
        costs = {tier: _cost_at(curve, right) for tier, curve in steps.items()}
        low = min(costs.values())
        cheapest = leader if leader is not None and costs[leader] == low else min(t for t in costs if costs[t] == low)
        if leader is not None and cheapest != leader:
            found.append(Crossover(left, leader, cheapest))
        leader, left = cheapest, right
    return found


def _cost_at(curve: list[tuple[Fraction, Fraction]], traffic_img_s: Fraction) -> Fraction:
    """The step covering `traffic_img_s` (the first edge at or above it)."""
    return next(cost for x, cost in curve if x >= traffic_img_s)
