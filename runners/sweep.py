"""`python -m runners.sweep [overrides] [-m]`: run the configured sweep on one GPU tier (or several with -m).

Thin entry point: composes the config with Hydra and calls `experiments.run.sweep.run_sweep`. Ctrl-C and SIGTERM
unwind through the sweep's `finally` blocks, which stop Triton, the Ray Serve app, the client actors and a Ray
the sweep started.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

# Parallel tier jobs report progress through Ray's log streaming; its deduplication would fold one trial's
# progress line into the previous one (they differ only in numbers). Read when ray is imported.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import experiments.config.schema  # noqa: F401 - registers the config schemas
from experiments.cluster.connection import TierUnavailableError
from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError
from experiments.config.overrides import check_overrides
from experiments.results.redaction import redact_files

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
log = logging.getLogger("tierbench")


class SweepFailedError(RuntimeError):
    pass


def _interrupt_on_signal(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from experiments.cluster.placement import PlacementError
    from experiments.config.typed import typed
    from experiments.run.bytecode import uncached_bytecode_hint
    from experiments.run.sweep import run_sweep

    # Hydra saved the overrides in the run folder: mask any password a tracking URI carried.
    redact_files(Path(HydraConfig.get().runtime.output_dir) / ".hydra")
    if threading.current_thread() is threading.main_thread():  # not so in some launchers' workers
        signal.signal(signal.SIGTERM, _interrupt_on_signal)
        # Also when started in the background of a non-interactive shell, which ignores SIGINT for its children:
        # an explicit `kill -INT` must still stop the sweep cleanly.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    hint = uncached_bytecode_hint()
    if hint:
        log.warning("%s", hint)
    try:
        config = typed(cfg)  # once: the sweep and its report take the same typed config
        code = run_sweep(config)
    except (ConfigError, TierUnavailableError, PlacementError) as exc:
        log.error("%s", exc)
        if multirun:
            raise  # a job of a multirun (maybe a Ray task): Hydra reports it once the other tiers are done
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        log.error("interrupted: servers, client actors and the local Ray were stopped. Resume with "
                  "sweep_id=%s (trials already ok are skipped)", cfg.sweep_id)
        sys.exit(EXIT_INTERRUPTED)
    if config.report and not multirun:  # a multirun's driver reports once every tier is done (ClusterCallback)
        from experiments.report.publish import sweep_answer

        print("\n".join(sweep_answer(config)), flush=True)
    if code:
        # An exception, not sys.exit: a multirun still runs its other tiers, then Hydra exits non-zero.
        raise SweepFailedError(f"some trials of tier {cfg.gpu.name} failed (their runs carry status=failed "
                               "and the reason)")


def overrides_first(args: list[str]) -> list[str]:
    """Overrides moved before Hydra's flags, so `gpu=a,b -m experiment.batch_sizes=[1]` works like
    `gpu=a,b experiment.batch_sizes=[1] -m`: Hydra's parser takes its positional overrides in one run, and
    argparse calls any after a flag "unrecognized arguments". Hydra's own parser says what is an override."""
    from hydra._internal.utils import get_args_parser

    known, unknown = get_args_parser().parse_known_args(args)
    stray = [a for a in unknown if not a.startswith("-")]  # overrides that came after a flag
    if not stray:
        return args
    overrides = list(known.overrides) + stray
    rest = list(args)
    for override in overrides:
        rest.remove(override)  # the first occurrence: the override itself (a flag's value is never an override)
    return overrides + rest


if __name__ == "__main__":
    sys.argv[1:] = overrides_first(sys.argv[1:])
    try:
        check_overrides(sys.argv[1:])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    signal.signal(signal.SIGTERM, _interrupt_on_signal)  # a multirun's driver too: its jobs are stopped cleanly
    try:
        main()
    except KeyboardInterrupt:  # a multirun's driver (a single run exits 130 from `main` itself)
        log.error("interrupted: the tier jobs stopped their servers and released their nodes. Resume with the "
                  "same command and the sweep_id each tier printed (trials already ok are skipped)")
        sys.exit(EXIT_INTERRUPTED)
