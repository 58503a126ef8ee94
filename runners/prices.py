"""`python -m runners.prices [--catalog PATH] [--write]`: refresh the GPU tiers' prices (conf/gpu/*.yaml) from
gpuhunt's catalog of cloud offers.

For each tier, the offers that are exactly its GPU (gpuhunt's GPU name and memory, mapped from the tier's NVML names;
where gpuhunt names two cards alike, e.g. the SXM and PCIe H100, only offers whose instance type says which) or, for
a CPU tier, its vCPUs on the instance type it names; of those, the cheapest on-demand and the cheapest spot offer per
GPU (single-GPU offers where there are any, else one GPU's share of a multi-GPU instance) become the alternative
prices `gpuhunt_on_demand` (kind on_demand) and `gpuhunt_spot` (kind interruptible), each with its provider, a source
naming the catalog, instance type and region, and the catalog's day as `seen`. The primary price changes only with
--primary, and never where the tier says `price_pinned: true`; an entry with `pinned: true` is never changed.

Without --write it changes nothing: it prints what it would change and the diff. With --write it rewrites only those
keys of each tier file, its comments and layout kept. Offers come from gpuhunt's query() (pip install gpuhunt; it
downloads the latest catalogs), or with --catalog from gpuhunt's published files: one provider's CSV, its catalog.zip,
or a folder of them (docs/prices.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from experiments.config.compose import CONF_DIR
from experiments.prices.catalog import filter_offers, query_gpuhunt, read_catalog, split_list
from experiments.prices.errors import PriceRefreshError
from experiments.prices.refresh import (
    DEFAULT_PREFIX,
    check_prefix,
    check_seen,
    refresh,
    render_catalog,
    render_plan,
    select_tiers,
    write,
)
from experiments.prices.tier_files import load_tiers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.prices", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--catalog", type=Path, default=None,
                        help="gpuhunt's catalog as files: a provider's CSV (aws.csv), a catalog.zip, or a folder of "
                             "them (default: gpuhunt's query(), which downloads the latest catalogs)")
    parser.add_argument("--tiers", action="append", default=[],
                        help="the tiers to refresh, comma-separated (e.g. l4,h100_sxm; default: every tier)")
    parser.add_argument("--provider", action="append", default=[],
                        help="only offers of these providers, as gpuhunt names them, comma-separated (aws, gcp, "
                             "azure, lambdalabs, runpod, ...)")
    parser.add_argument("--region", action="append", default=[],
                        help="only offers in these regions, as the provider names them, comma-separated "
                             "(e.g. us-east-1)")
    parser.add_argument("--seen", default=None,
                        help="the day the prices were seen, YYYY-MM-DD (default: the catalog version's day, else the "
                             "catalog file's date)")
    parser.add_argument("--primary", action="store_true",
                        help="also set each tier's primary price (price_per_hour_usd, price_source, price_seen) to its "
                             "cheapest on-demand offer; never where the tier says price_pinned: true")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help=f"the alternative prices' names: <prefix>_on_demand, <prefix>_spot "
                             f"(default: {DEFAULT_PREFIX})")
    parser.add_argument("--conf-dir", type=Path, default=CONF_DIR / "gpu",
                        help="the tier files' folder (default: the repository's conf/gpu)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print what would change and the diff, write nothing (the default)")
    mode.add_argument("--write", action="store_true", help="rewrite the tier files that change")
    args = parser.parse_args(argv)
    _quiet_gpuhunt()

    try:
        prefix = check_prefix(args.prefix)
        seen = check_seen(args.seen)
        tiers = select_tiers(load_tiers(args.conf_dir), args.tiers)
        providers, regions = split_list(args.provider), split_list(args.region)
        catalog = read_catalog(args.catalog, seen) if args.catalog else query_gpuhunt(providers, seen)
        offers = filter_offers(catalog, providers, regions)
        plans = refresh(tiers, offers, prefix, args.primary)
    except PriceRefreshError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render_catalog(catalog))
    filters = [f"provider {','.join(providers)}" if providers else "", f"region {','.join(regions)}" if regions else ""]
    print(f"offers used: {len(offers)}" + (f" ({'; '.join(f for f in filters if f)})" if any(filters) else ""))
    for plan in plans:
        print()
        print(render_plan(plan))
    changed = [p for p in plans if p.changed]
    print()
    if not changed:
        print("nothing to change")
        return 0
    if not args.write:
        for plan in changed:
            print(plan.diff())
        print(f"dry run: {len(changed)} tier file(s) would change, nothing written; run again with --write to apply")
        return 0
    for path in write(changed):
        print(f"written: {path}")
    return 0


class _OneLine(logging.Formatter):
    """gpuhunt's warnings (a provider's catalog it could not load, one it skips) in one line each, no traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" ({type(exc).__name__}: {' '.join(str(exc).split())})"
        return f"gpuhunt: {text}"


def _quiet_gpuhunt() -> None:
    logger = logging.getLogger("gpuhunt")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine())
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False


if __name__ == "__main__":
    sys.exit(main())
