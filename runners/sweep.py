"""`python -m runners.sweep [overrides] [-m]`: run the configured sweep on one GPU tier (or several with -m).

Thin entry point: composes the config with Hydra and calls `experiments.sweep.run_sweep`. Ctrl-C and SIGTERM
unwind through the sweep's `finally` blocks, which stop Triton, the Ray Serve app, the client actors and a Ray
the sweep started.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import experiments.config  # noqa: F401 - registers the config schemas
from experiments.cluster import TierUnavailableError
from experiments.redaction import redact_files
from experiments.validation import ConfigError, check_overrides

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
log = logging.getLogger("tierbench")


class SweepFailedError(RuntimeError):
    pass


def _interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from experiments.sweep import run_sweep

    # Hydra saved the overrides in the run folder: mask any password a tracking URI carried.
    redact_files(Path(HydraConfig.get().runtime.output_dir) / ".hydra")
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        code = run_sweep(cfg)
    except (ConfigError, TierUnavailableError) as exc:
        log.error("%s", exc)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        log.error("interrupted: servers, client actors and the local Ray were stopped. Resume with "
                  "sweep_id=%s (trials already ok are skipped)", cfg.sweep_id)
        sys.exit(EXIT_INTERRUPTED)
    if code:
        # An exception, not sys.exit: a multirun still runs its other tiers, then Hydra exits non-zero.
        raise SweepFailedError(f"some trials of tier {cfg.gpu.name} failed (their runs carry status=failed "
                               "and the reason)")


if __name__ == "__main__":
    try:
        check_overrides(sys.argv[1:], CONF_DIR)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    main()
