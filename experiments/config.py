"""Typed schemas for the Hydra config tree (`conf/`), registered in Hydra's ConfigStore.

YAML files extend these schemas through their defaults list (`- base_gpu`, ...), so a misspelt key or a
value of the wrong type fails when the config is composed. Rules that types cannot express (allowed
names, positive sizes) live in `experiments.validation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class GpuTierConfig:
    """A GPU tier: what it is called, what it costs and how its nodes are recognised."""

    name: str = MISSING
    display_name: str = MISSING
    price_per_hour_usd: float = MISSING
    price_source: str = ""
    price_seen: str = ""
    requires_gpu: bool = True
    # Substrings matched against the NVML GPU name to recognise a node of this tier.
    gpu_name_patterns: list[str] = field(default_factory=list)


@dataclass
class ModelConfig:
    """An image classifier built by a torchvision factory with deterministic random weights."""

    name: str = MISSING
    factory: str = MISSING
    seed: int = 0
    num_classes: int = 1000
    input_shape: list[int] = field(default_factory=lambda: [3, 224, 224])
    max_batch_size: int = 32


@dataclass
class ExperimentConfig:
    """The trial matrix and how each trial is measured."""

    name: str = MISSING
    backends: list[str] = field(default_factory=list)
    protocols: list[str] = field(default_factory=list)
    input_formats: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)
    # Warm-up ends once both are reached; its requests are dropped from the measurement.
    warmup_requests: int = 10
    warmup_s: float = 1.0
    window_s: float = 5.0
    request_timeout_s: float = 60.0
    # Client actors per trial; each runs its share of the concurrency with its own async client.
    client_actors: int = 1
    client_num_cpus: float = 0.1


@dataclass
class ClusterConfig:
    """How the sweep reaches Ray."""

    name: str = MISSING
    address: str | None = None
    num_cpus: int | None = None
    object_store_memory: int | None = None


@dataclass
class ToleranceConfig:
    """How far a backend's logits may be from the PyTorch reference's and still count as the same function."""

    max_abs_diff: float = MISSING
    min_top1_agreement: float = MISSING


@dataclass
class CrosscheckConfig:
    """Cross-backend validation before each server group is measured (experiments/crosscheck.py)."""

    enabled: bool = True
    images: int = 8
    # by the arithmetic a backend computes in (Backend.numerics): fp32 | fp16
    tolerances: dict[str, ToleranceConfig] = field(default_factory=dict)


@dataclass
class MlflowConfig:
    experiment: str = "tierbench"
    tracking_uri: str | None = None


@dataclass
class ServingConfig:
    host: str = "127.0.0.1"
    triton_server: str = "auto"
    start_timeout_s: float = 180.0
    stop_timeout_s: float = 20.0


@dataclass
class TierbenchConfig:
    gpu: GpuTierConfig = MISSING
    model: ModelConfig = MISSING
    experiment: ExperimentConfig = MISSING
    cluster: ClusterConfig = MISSING
    # backend name -> settings with the `_target_` class that serves it
    backends: dict[str, Any] = field(default_factory=dict)
    sweep_id: str = MISSING
    results_dir: str = "runs"
    quiet: bool = False
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    crosscheck: CrosscheckConfig = field(default_factory=CrosscheckConfig)


def register_configs() -> None:
    """Register the schemas; YAML files name them in their defaults lists."""
    cs = ConfigStore.instance()
    cs.store(name="tierbench_schema", node=TierbenchConfig)
    cs.store(group="gpu", name="base_gpu", node=GpuTierConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="experiment", name="base_experiment", node=ExperimentConfig)
    cs.store(group="cluster", name="base_cluster", node=ClusterConfig)


register_configs()
