"""`python -m runners.report [SWEEP_ID | latest] [--slo-p99-ms MS] [--traffic-img-s R [--peak-img-s P] [--headroom H]]`:
the cost-per-image report of a sweep, with a capacity plan for a traffic when one is given; a generative sweep's is
per 1M tokens (`[--ttft-p99-ms MS] [--tpot-p99-ms MS] [--peak-rps R [--headroom H]]`).

Reads the sweep's runs from MLflow, writes report.md, report.html and PNG plots to
`<results_dir>/<sweep_id>/report/`, attaches them to the sweep run and prints the answer with the path.
The store and experiment default to the sweep's own config (`mlflow.tracking_uri`, else $MLFLOW_TRACKING_URI,
else sqlite under ./mlflow/; `mlflow.experiment`; `results_dir`), so a plain `python -m runners.report`
after `python -m runners.sweep` reports that sweep. argparse rather than Hydra: the sweep id is positional.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

from experiments.config.capacity import DEFAULT_HEADROOM, FLAG_KEYS, MAX_HEADROOM, Traffic, traffic
from experiments.config.errors import ConfigError
from experiments.config.prices import PRICE_MAX_AGE_DAYS

log = logging.getLogger("tierbench.report")


def _config_defaults() -> tuple[str | None, str, str]:
    """`mlflow.tracking_uri`, `mlflow.experiment` and `results_dir` as the sweep composes them."""
    from experiments.config.compose import compose

    cfg = compose()
    return cfg.mlflow.tracking_uri, cfg.mlflow.experiment, cfg.results_dir


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runners.report", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_id", nargs="?", default="latest",
                        help="the sweep's id (its runs' sweep_id tag), or `latest` (default)")
    parser.add_argument("--slo-p99-ms", type=float, default=None,
                        help="latency target: pick the cheapest (tier, backend, protocol, batch, concurrency) "
                             "whose p99 is within it")
    parser.add_argument("--traffic-img-s", type=float, default=None,
                        help="capacity plan: the average traffic in images/s (a request of b images counts b): "
                             "nodes and $/month per tier within the p99 target (docs/capacity-plan.md)")
    parser.add_argument("--peak-img-s", type=float, default=None,
                        help="capacity plan: the peak the nodes are sized for, >= the average (default: the average)")
    parser.add_argument("--headroom", type=float, default=None,
                        help=f"capacity plan: spare capacity above the peak, a fraction (default {DEFAULT_HEADROOM:g}: "
                             f"nodes for the peak +{DEFAULT_HEADROOM * 100:g} %%)")
    parser.add_argument("--traffic-rps", type=float, default=None, help=argparse.SUPPRESS)  # refused: img/s
    parser.add_argument("--ttft-p99-ms", type=float, default=None,
                        help="generative sweep: the TTFT p99 target (ms): pick the cheapest point per 1M output tokens "
                             "within it (default: the sweep's experiment.slo.ttft_p99_ms when it ends)")
    parser.add_argument("--tpot-p99-ms", type=float, default=None,
                        help="generative sweep: the TPOT p99 target (ms), as --ttft-p99-ms (either or both)")
    parser.add_argument("--peak-rps", type=float, default=None,
                        help="generative sweep: capacity plan for this peak of requests/s (each as long as the chosen "
                             "point's measured answers): nodes and $/month per tier within the targets")
    parser.add_argument("--baseline-tier", default=None,
                        help="tier the cross-tier ratios divide by (default: the first tier by name)")
    parser.add_argument("--price-max-age-days", type=int, default=PRICE_MAX_AGE_DAYS,
                        help=f"call a price stale when it was seen longer than this before the trials "
                             f"(default {PRICE_MAX_AGE_DAYS})")
    parser.add_argument("--tracking-uri", default=None, help="MLflow store (default: as the sweep resolves it)")
    parser.add_argument("--experiment", default=None, help="MLflow experiment (default: mlflow.experiment)")
    parser.add_argument("--results-dir", default=None, help="where sweeps keep their folders (default: results_dir)")
    parser.add_argument("--out", default=None, help="report folder (default: <results_dir>/<sweep_id>/report)")
    parser.add_argument("--no-log", action="store_true", help="don't attach the report to the sweep's MLflow run")
    args = parser.parse_args(argv)
    if args.slo_p99_ms is not None and args.slo_p99_ms <= 0:
        parser.error(f"--slo-p99-ms={args.slo_p99_ms:g} is not allowed: give a latency target > 0 in ms")
    for flag in ("ttft_p99_ms", "tpot_p99_ms"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value > 0):
            parser.error(f"--{flag.replace('_', '-')}={value:g} is not allowed: give a latency target > 0 in ms")
    args.capacity = _capacity(parser, args)
    return args


def _capacity(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Traffic | None:
    """The checked traffic of an image capacity plan, None when none is asked for (a generative sweep's `--peak-rps` is
    checked here too and kept in `args`); a bad figure ends the command here."""
    if args.traffic_rps is not None:
        parser.error(f"--traffic-rps={args.traffic_rps:g} is not allowed: the capacity plan takes images/s, the unit "
                     "of every throughput it sizes nodes with; give --traffic-img-s (requests/s × images per request)")
    if args.peak_rps is not None:
        _check_peak_rps(parser, args)
        return None
    if args.traffic_img_s is None:
        extra = next((flag for flag, value in (("--peak-img-s", args.peak_img_s), ("--headroom", args.headroom))
                      if value is not None), None)
        if extra:
            parser.error(f"{extra} is not allowed alone: it shapes a capacity plan; give the average traffic too, "
                         "e.g. --traffic-img-s 1000")
        return None
    try:
        return traffic(args.traffic_img_s, args.peak_img_s,
                       DEFAULT_HEADROOM if args.headroom is None else args.headroom, FLAG_KEYS)
    except ConfigError as exc:
        parser.error(str(exc))


def _check_peak_rps(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A generative sweep's plan: a peak of requests/s > 0 and a headroom in [0, MAX_HEADROOM], never with an image
    plan's traffic."""
    image = next((flag for flag, value in (("--traffic-img-s", args.traffic_img_s), ("--peak-img-s", args.peak_img_s))
                  if value is not None), None)
    if image:
        parser.error(f"{image} is not allowed with --peak-rps: --peak-rps sizes a generative sweep's plan "
                     f"(requests/s), {image} an image sweep's (images/s); give the one of the sweep's workload")
    if not (math.isfinite(args.peak_rps) and args.peak_rps > 0):
        parser.error(f"--peak-rps={args.peak_rps:g} is not allowed: give the peak in requests/s, > 0, e.g. "
                     "--peak-rps 20")
    if args.headroom is not None and not (math.isfinite(args.headroom) and 0 <= args.headroom <= MAX_HEADROOM):
        parser.error(f"--headroom={args.headroom:g} is not allowed: a fraction of the peak in [0, {MAX_HEADROOM:g}]: "
                     "0.2 keeps 20 % spare capacity above it (write 0.2, not 20); for more, give a higher peak")


def main(argv: list[str] | None = None) -> int:
    from experiments.report.build import ReportOptions
    from experiments.report.data import ReportError
    from experiments.report.publish import answer_lines, make_report
    from experiments.results.tracking import tracking_uri

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    configured_uri, experiment, results_dir = _config_defaults()
    uri = tracking_uri(args.tracking_uri or configured_uri)
    options = ReportOptions(slo_p99_ms=args.slo_p99_ms, baseline_tier=args.baseline_tier, capacity=args.capacity,
                            price_max_age_days=args.price_max_age_days, ttft_p99_ms=args.ttft_p99_ms,
                            tpot_p99_ms=args.tpot_p99_ms, peak_rps=args.peak_rps,
                            headroom=args.headroom if args.peak_rps is not None else None)
    try:
        published = make_report(uri, args.experiment or experiment, args.sweep_id,
                                Path(args.results_dir or results_dir), options,
                                out=Path(args.out) if args.out else None, log_to_mlflow=not args.no_log)
    except ReportError as exc:
        log.error("%s", exc)
        return 2
    print("\n".join(answer_lines(published)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
