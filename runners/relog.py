"""`python -m runners.relog runs/<sweep_id>[/<tier>]`: log a sweep's run folder to MLflow, e.g. after the
tracking store was unreachable during the sweep. Idempotent: trials already in the store are left alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.results.layout import TIER_FILE, TierFolder
from experiments.results.publish import publish_folder
from experiments.results.redaction import redact
from experiments.results.tracking import tracking_uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.relog", description=__doc__)
    parser.add_argument("folder", type=Path, help="a sweep's folder (runs/<sweep_id>) or one tier's in it")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite under ./mlflow/)")
    args = parser.parse_args(argv)
    folders = TierFolder.within(args.folder)
    if not folders:
        parser.error(f"folder={str(args.folder)!r}: no {TIER_FILE} in it or in its subfolders; give the folder "
                     "a sweep printed (runs/<sweep_id> or runs/<sweep_id>/<tier>)")
    uri = tracking_uri(args.tracking_uri)
    for folder in folders:
        try:
            logged, present = publish_folder(uri, folder)
        except ConnectionError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{folder.path}: {logged} trial runs logged, {present} already in {redact(uri)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
