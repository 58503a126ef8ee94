"""Plan a tier's trials from the config: one group per entry of `experiment.backends` (its server starts
once), the cross product of protocols x input formats x batch sizes x concurrency inside it.

`experiment.stacks` narrows the product to the stacks a study measured, `experiment.matrix` its (batch, load) points.
An entry names a server config in `conf/backends/` (e.g. `triton_onnx`, or a variant such as
`pytorch_fp16`); its settings' family says which backend it is (pytorch | triton_onnx | triton_trt | fastapi |
torchserve | endpoint), so variants of one backend compare like with like.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from experiments.config.choices import LoadMode, TrialMatrix
from experiments.config.stacks import stacks

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


@dataclass(frozen=True)
class Trial:
    tier: str
    model: str
    backend: str  # the settings' family: pytorch | triton_onnx | triton_trt | fastapi | torchserve | endpoint
    variant: str  # the entry of experiment.backends / conf/backends that configures it
    protocol: str
    input_format: str
    batch_size: int
    concurrency: int  # closed-loop request loops; 0 for open loop
    load_mode: LoadMode = LoadMode.CLOSED
    request_rate: float = 0.0  # open loop: requests/s
    # The caching audit's twin (experiment.inputs.audit): every request carries the same bytes. Never an answer: it
    # is compared with the same point sent distinct inputs.
    repeated_input: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "load_mode", LoadMode(self.load_mode))  # e.g. read back from a record.json

    @property
    def load(self) -> float:
        """The concurrency (closed loop) or the request rate (open loop)."""
        return self.load_mode.load_of(self.concurrency, self.request_rate)

    @property
    def load_label(self) -> str:
        return self.load_mode.label(self.concurrency, self.request_rate)

    @property
    def name(self) -> str:
        """Readable run name, e.g. `rtx4090/triton_onnx/grpc/tensor/b8/c16` or `.../b8/poisson-r200`."""
        name = f"{self.tier}/{self.variant}/{self.protocol}/{self.input_format}/b{self.batch_size}/{self.load_label}"
        return f"{name}/repeated" if self.repeated_input else name

    def at_load(self, load: float) -> Trial:
        """The same operating point at another load (concurrency or rate): for the SLO search."""
        return replace(self, **self.load_mode.trial_fields(load))

    @property
    def slug(self) -> str:
        return self.name.replace("/", "_")

    def params(self) -> dict[str, Any]:
        fields = {k: v for k, v in asdict(self).items() if k not in ("tier", "variant")}
        return {"gpu_tier": self.tier, "backend_variant": self.variant, **fields}


@dataclass
class TrialGroup:
    """Trials served by one server start."""

    variant: str
    trials: list[Trial] = field(default_factory=list)


def plan_trials(cfg: TierbenchConfig) -> list[TrialGroup]:
    """One group per backend variant with trials, in `experiment.backends` order: each of its stacks at each
    (batch size, load) point of `experiment.matrix`."""
    exp = cfg.experiment
    points = TrialMatrix(exp.matrix).points([int(b) for b in exp.batch_sizes], LoadMode(exp.load_mode).loads(exp))
    chosen = stacks(exp)
    groups = []
    for variant in exp.backends:
        group = TrialGroup(variant)
        for stack in (s for s in chosen if s.variant == variant):
            for batch, load in points:
                trial = planned_trial(cfg, variant, stack.protocol, stack.input_format, batch, load)
                group.trials.append(trial)
                if exp.inputs.audit:
                    group.trials.append(replace(trial, repeated_input=True))
        if group.trials:
            groups.append(group)
    return groups


def planned_trial(cfg: TierbenchConfig, variant: str, protocol: str, input_format: str, batch_size: int,
                  load: float) -> Trial:
    """One trial of the config's tier, model and load mode: what `plan_trials` plans, or a benchmark measures."""
    family = cfg.backends[variant].family
    trial = Trial(cfg.gpu.name, cfg.model.name, family, variant, protocol, input_format, int(batch_size), 0,
                  cfg.experiment.load_mode)
    return trial.at_load(load)


def trial_key(trial: Trial, measurement: dict[str, Any], backend: dict[str, Any],
              model: dict[str, Any] | None = None) -> str:
    """Identity of a trial's resolved config: what it measures and how (for resume and deduplication); `backend`
    is its settings' `identity()`, `model` what identifies the model beyond its name (its file's content)."""
    payload = {"trial": asdict(trial), "measurement": measurement, "backend": backend}
    if model:  # absent for seeded models: their keys stay those of earlier sweeps
        payload["model"] = model
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
