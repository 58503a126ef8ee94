"""Plan a tier's trials from the config: one group per backend (its server starts once), the cross product
of protocols x input formats x batch sizes x concurrency inside it."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Trial:
    tier: str
    model: str
    backend: str
    protocol: str
    input_format: str
    batch_size: int
    concurrency: int

    @property
    def name(self) -> str:
        """Readable run name, e.g. `rtx4090/triton_onnx/grpc/tensor/b8/c16`."""
        return (f"{self.tier}/{self.backend}/{self.protocol}/{self.input_format}/"
                f"b{self.batch_size}/c{self.concurrency}")

    @property
    def slug(self) -> str:
        return self.name.replace("/", "_")

    def params(self) -> dict[str, Any]:
        return {"gpu_tier": self.tier, **{k: v for k, v in asdict(self).items() if k != "tier"}}


@dataclass
class TrialGroup:
    """Trials served by one server start."""

    backend: str
    trials: list[Trial] = field(default_factory=list)


def plan_trials(cfg: Any) -> list[TrialGroup]:
    exp = cfg.experiment
    groups = []
    for backend in exp.backends:
        group = TrialGroup(backend)
        for protocol, input_format, batch, conc in itertools.product(
            exp.protocols, exp.input_formats, exp.batch_sizes, exp.concurrency
        ):
            group.trials.append(Trial(cfg.gpu.name, cfg.model.name, backend, protocol, input_format,
                                      int(batch), int(conc)))
        groups.append(group)
    return groups


def trial_key(trial: Trial, measurement: dict[str, Any], backend_settings: dict[str, Any]) -> str:
    """Identity of a trial's resolved config: what it measures and how (for resume and deduplication)."""
    payload = {"trial": asdict(trial), "measurement": measurement, "backend": backend_settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
