"""`python -m runners.sweep [overrides] [-m]`: run the configured sweep on one GPU tier (or several with -m).

Thin entry point: composes the config with Hydra and calls `experiments.sweep.run_sweep`.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

# Parallel tier jobs report progress through Ray's log streaming; its deduplication would fold one trial's
# progress line into the previous one (they differ only in numbers). Read when ray is imported.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import experiments.config  # noqa: F401 - registers the config schemas
from experiments.cluster import TierUnavailableError
from experiments.validation import ConfigError

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
log = logging.getLogger("tierbench")


class SweepFailedError(RuntimeError):
    pass


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from experiments.placement import PlacementError
    from experiments.sweep import run_sweep

    try:
        code = run_sweep(cfg)
    except (ConfigError, TierUnavailableError, PlacementError) as exc:
        log.error("%s", exc)
        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # a job of a multirun (maybe a Ray task): Hydra reports it once the other tiers are done
        sys.exit(2)
    if code:
        # An exception, not sys.exit: a multirun still runs its other tiers, then Hydra exits non-zero.
        raise SweepFailedError(f"some trials of tier {cfg.gpu.name} failed (their runs carry status=failed "
                               "and the reason)")


if __name__ == "__main__":
    main()
