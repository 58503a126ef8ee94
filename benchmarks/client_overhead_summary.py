"""The tables of docs/benchmarks.md from a `client_overhead.py` result of several runs: each row's range over the
runs, how many met each goal, perf_analyzer's own run-to-run spread beside them (the noise the goals sit in).

    python benchmarks/client_overhead_summary.py benchmarks/results/client_overhead_tiny_closed_open.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
from collections.abc import Callable, Iterable
from typing import Any

Row = dict[str, Any]


def measured(value: float | None) -> bool:
    """A figure the row has (a column a row's section does not fill is None; a server that counts nothing, NaN)."""
    return value is not None and not math.isnan(value)


def span(values: Iterable[float | None], fmt: str = "{:.2f}") -> str:
    """`low–high` of the values that were measured (one value alone, blank for none)."""
    measured_values = [v for v in values if measured(v)]
    if not measured_values:
        return ""
    low, high = min(measured_values), max(measured_values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def closed_table(rows: list[Row]) -> list[str]:
    groups: dict[tuple[str, str, str], list[Row]] = collections.defaultdict(list)
    for row in rows:
        if row["section"] == "closed" and "error" not in row:
            groups[(row["server"], row["protocol"], row["load"])].append(row)
    lines = ["| server | protocol | load | throughput ×PA | p50 ×PA | engine CPU µs/req | PA CPU µs/req | CPU ×PA "
             "| independent check | PA's own spread | all goals met |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (server, protocol, load), group in groups.items():
        if server.startswith("triton"):
            check = "Triton " + span((r.get("server_count_ratio") for r in group), "{:.3f}")
        elif protocol == "http":
            check = "wrk " + span(r.get("wrk_ratio") for r in group)
        else:
            check = "—"
        pa = [r["pa_infer_s"] for r in group]
        lines.append(
            f"| {server} | {protocol} | {load} | {span(r['throughput_ratio'] for r in group)} "
            f"| {span(r['p50_ratio'] for r in group)} "
            f"| {span((r['client_cpu_us_per_request'] for r in group), '{:.0f}')} "
            f"| {span((r['pa_cpu_us'] for r in group), '{:.0f}')} | {span(r['cpu_ratio'] for r in group)} | {check} "
            f"| {max(pa) / min(pa):.2f}× | {sum(r['meets_goal'] for r in group)} of {len(group)} |")
    closed = [r for group in groups.values() for r in group]

    def tally(name: str, rows_: list[Row], met: Callable[[Row], bool]) -> str:
        return f"- {name}: {sum(met(r) for r in rows_)} of {len(rows_)}"

    counted = [r for r in closed if measured(r.get("server_count_ratio"))]
    wrk = [r for r in closed if measured(r.get("wrk_ratio"))]
    errors = [r for r in rows if "error" in r]
    return lines + ["", tally("throughput ≥ 0.95× and p50 ≤ 1.1×", closed,
                              lambda r: r["throughput_ratio"] >= 0.95 and r["p50_ratio"] <= 1.1),
                    tally("engine CPU per request ≤ 1.2× perf_analyzer's", closed, lambda r: r["cpu_ratio"] <= 1.2),
                    tally("Triton's own count 0.97–1.03", counted, lambda r: 0.97 <= r["server_count_ratio"] <= 1.03),
                    tally("wrk within 10 %", wrk, lambda r: abs(r["wrk_ratio"] - 1) <= 0.1),
                    f"- rows that failed: {len(errors)}" + "".join(f"\n  - {e['error'][:120]}" for e in errors)]


def open_table(rows: list[Row]) -> list[str]:
    lines = ["| run | protocol | rate (85 % of PA's best) | arrivals | sent > 5 ms late | achieved / target "
             "| achieved / offered | p50 ms | engine CPU µs/req | met |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["section"] == "open" and "error" not in r:
            lines.append(
                f"| {r['run']} | {r['protocol']} | {r['target_rps']:.0f} | {r['arrivals']:.0f} "
                f"| {r['late_fraction'] * 100:.2f} % | {r['achieved_vs_target']:.3f} | {r['achieved_vs_offered']:.3f} "
                f"| {r['tierbench_p50_ms']:.2f} | {r['client_cpu_us_per_request']:.0f} "
                f"| {'yes' if r['meets_goal'] else 'no'} |")
    return lines


def speedup_table(rows: list[Row]) -> list[str]:
    groups: dict[tuple[str, str], list[Row]] = collections.defaultdict(list)
    for row in rows:
        if row["section"] == "speedup":
            groups[(row["server"], row["load"])].append(row)
    lines = ["| server | load | gRPC/HTTP, the engine | gRPC/HTTP, perf_analyzer | agreement | within 10 % |",
             "|---|---|---|---|---|---|"]
    for (server, load), group in groups.items():
        lines.append(f"| {server} | {load} | {span(r['tierbench_speedup'] for r in group)} "
                     f"| {span(r['pa_speedup'] for r in group)} | {span(r['speedup_agreement'] for r in group)} "
                     f"| {sum(r['meets_goal'] for r in group)} of {len(group)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", help="a JSON file client_overhead.py wrote")
    result = json.load(open(parser.parse_args().result))
    rows = result["rows"]
    print(f"machine: {result['machine']}, runs: {result['runs']}\n")
    for table in (closed_table(rows), open_table(rows), speedup_table(rows)):
        print("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
