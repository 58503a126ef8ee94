"""`python -m runners.ceiling [--json FILE] [overrides ...]`: what this machine's GPU (or CPU) does with the model, in
every runtime the experiment's backends serve it with, timed in-process: no server, no client, no network.

The same timing a sweep makes on each tier node before its first server starts (docs/ceiling.md), run here alone and
printed as one table per runtime: batch-1 latency, and throughput over batch sizes up to `model.max_batch_size`, with
the host round trip a server pays (NumPy in, NumPy out) and, on a GPU, device-resident (input and output stay on the
GPU). Overrides are the sweep's (`model=resnet50`, `experiment=first_light`, `experiment.backends=[pytorch_fp16]`,
`ceiling.min_time_s=1`, `ceiling.cache=false` to time again what the node's cache already holds, replacing it).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import runners  # noqa: F401 - warns on a Python tierbench does not support

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig
    from experiments.measure.ceiling import NodeCeiling


def ceiling_here(cfg: TierbenchConfig) -> NodeCeiling:
    """Time the runtimes of `cfg`'s backends on this machine: the `NodeCeiling`."""
    from experiments.measure.ceiling import NodeCeiling, measure_here
    from experiments.plan import plan_trials
    from experiments.run.server_group import build_backend
    from experiments.run.tier_ceiling import TierCeiling
    from serving.probe import describe_node

    node = describe_node()
    tier = TierCeiling(cfg, node, lambda name: build_backend(cfg, name, node, {}))
    runtimes = tier.needed(plan_trials(cfg))
    if not runtimes:
        raise SystemExit(f"none of {list(cfg.experiment.backends)} runs on this machine (python -m runners.doctor "
                         "says why): nothing to time")
    budget = {"min_time_s": float(cfg.ceiling.min_time_s), "min_calls": int(cfg.ceiling.min_calls)}
    print(f"timing {len(runtimes)} runtime(s) of model {cfg.model.name} on {node.gpu_name} ({node.cpu_count} cores): "
          + ", ".join(r.key for r in runtimes), flush=True)
    result = measure_here(cfg.model, [r.to_json() for r in runtimes],
                          sorted({int(b) for b in cfg.experiment.batch_sizes}), budget, bool(cfg.ceiling.cache),
                          cfg.ceiling.cache_dir)
    return NodeCeiling.from_json(result)


def table(ceiling: NodeCeiling) -> str:
    """One block per runtime: a row per batch size, round trip and (GPU) device-resident side by side."""
    from serving.inprocess import RESIDENT, ROUND_TRIP

    lines = []
    for key, timing in ceiling.timings.items():
        cached = " (from the node's cache)" if key in ceiling.cached else f" ({timing.setup_s + timing.timed_s:.1f} s)"
        lines.append(f"\n{key}{cached}: {', '.join(f'{k} {v}' for k, v in timing.versions.items())}")
        resident = bool(timing.of_mode(RESIDENT))
        header = f"  {'batch':>5}  {'round-trip p50 ms':>17}  {'img/s':>10}"
        lines.append(header + (f"  {'resident p50 ms':>15}  {'img/s':>10}" if resident else ""))
        for point in timing.of_mode(ROUND_TRIP):
            row = f"  {point.batch_size:>5}  {point.p50_ms:>17.3f}  {point.img_s:>10,.0f}"
            other = timing.point(point.batch_size, RESIDENT)
            if other is not None:
                row += f"  {other.p50_ms:>15.3f}  {other.img_s:>10,.0f}"
            lines.append(row)
        best = timing.best(ROUND_TRIP)
        text = f"  best: {best.img_s:,.0f} img/s at batch {best.batch_size} (round trip)"
        if resident:
            top = timing.best(RESIDENT)
            text += f"; {top.img_s:,.0f} img/s at batch {top.batch_size} (device-resident)"
        lines.append(text)
    lines += [f"\n{key}: not timed: {why}" for key, why in ceiling.errors.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.ceiling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the timings to this file")
    parser.add_argument("overrides", nargs="*", help="the sweep's overrides, e.g. model=resnet50")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from experiments.config.compose import load_config
    from experiments.config.errors import ConfigError
    from experiments.config.validation import validate

    try:
        cfg = load_config(args.overrides)
        validate(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ceiling = ceiling_here(cfg)
    print(table(ceiling))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(ceiling.to_json(), indent=1))
        print(f"\nwritten: {args.json}")
    return 1 if ceiling.errors and not ceiling.timings else 0


if __name__ == "__main__":
    sys.exit(main())
