"""Plan a tier's trials from the config: one group per entry of `experiment.backends` (its server starts
once), the cross product of protocols x input formats x batch sizes x concurrency inside it.

An entry names a server config in `conf/backends/` (e.g. `triton_onnx`, or a variant such as
`pytorch_fp16`); its `backend` field says which of the contract's backends it is (pytorch | triton_onnx |
triton_trt), so variants of one backend compare like with like.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any


def load_label(load_mode: str, concurrency: int, request_rate: float) -> str:
    """A load as trial names and the report show it: `c16` (closed loop), `poisson-r200` (open loop, req/s)."""
    return f"c{concurrency}" if load_mode == "closed" else f"{load_mode}-r{request_rate:g}"


@dataclass(frozen=True)
class Trial:
    tier: str
    model: str
    backend: str  # pytorch | triton_onnx | triton_trt
    variant: str  # the entry of experiment.backends / conf/backends that configures it
    protocol: str
    input_format: str
    batch_size: int
    concurrency: int  # closed-loop request loops; 0 for open loop
    load_mode: str = "closed"  # closed | constant | poisson
    request_rate: float = 0.0  # open loop: requests/s

    @property
    def load_label(self) -> str:
        return load_label(self.load_mode, self.concurrency, self.request_rate)

    @property
    def name(self) -> str:
        """Readable run name, e.g. `rtx4090/triton_onnx/grpc/tensor/b8/c16` or `.../b8/poisson-r200`."""
        return f"{self.tier}/{self.variant}/{self.protocol}/{self.input_format}/b{self.batch_size}/{self.load_label}"

    def at_load(self, load: float) -> Trial:
        """The same operating point at another load (concurrency or rate): for the SLO search."""
        if self.load_mode == "closed":
            return replace(self, concurrency=int(load))
        return replace(self, request_rate=float(load))

    @property
    def load(self) -> float:
        return self.concurrency if self.load_mode == "closed" else self.request_rate

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


def plan_trials(cfg: Any) -> list[TrialGroup]:
    exp = cfg.experiment
    groups = []
    for variant in exp.backends:
        backend = cfg.backends[variant].backend
        group = TrialGroup(variant)
        loads = exp.concurrency if exp.load_mode == "closed" else exp.request_rates
        for protocol, input_format, batch, load in itertools.product(
            exp.protocols, exp.input_formats, exp.batch_sizes, loads
        ):
            trial = Trial(cfg.gpu.name, cfg.model.name, backend, variant, protocol, input_format, int(batch), 0,
                          exp.load_mode)
            group.trials.append(trial.at_load(load))
        groups.append(group)
    return groups


def trial_key(trial: Trial, measurement: dict[str, Any], backend_settings: dict[str, Any]) -> str:
    """Identity of a trial's resolved config: what it measures and how (for resume and deduplication)."""
    payload = {"trial": asdict(trial), "measurement": measurement, "backend": backend_settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
