"""The command that resumes one tier of a sweep: the overrides it was run with (Hydra's, for this tier's job),
the tier alone, the same `sweep_id`, so trials already `ok` are skipped and the rest run."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


def _job_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def resume_command(cfg: TierbenchConfig, overrides: list[str] | None = None) -> str:
    """`python -m runners.sweep ... gpu=<tier> sweep_id=<id>` for the tier of `cfg` (a single run, not -m)."""
    given = _job_overrides() if overrides is None else overrides
    kept = [o for o in given if o.split("=", 1)[0].lstrip("+~") not in ("gpu", "sweep_id", "hydra.mode")]
    args = [*kept, f"gpu={cfg.gpu.name}", f"sweep_id={cfg.sweep_id}"]
    return shlex.join(["python", "-m", "runners.sweep", *args])
