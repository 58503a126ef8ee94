"""What a backend package (`serving/<backend>/`) tells the rest of tierbench, through one line of the registry
(`serving/registry.py`): the settings its config entries extend, the names of its processes, the facts of a node it
decides by, its rows of the doctor's table, its extra of pyproject.toml, what it asks of a Ray cluster (the cluster's
switches among it), how the runtimes its servers compute in are timed in-process and what it writes beside an
exported model. Everything else of the backend stays in its folder: its `Backend` class is named by its settings'
`_target_`, its clients by the specs it hands out, its deploy files by `Backend.deploy_files`, its variants by
conf/backends/<name>.yaml."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

    from serving.inprocess import RuntimeCaller
    from serving.model_config import ModelConfig
    from serving.node import NodeInfo
    from serving.runtime import Runtime
    from serving.settings import BackendSettings, ClusterSwitches


class DoctorRow(NamedTuple):
    """One row of `runners.doctor`'s table: what, its version or state, the detail."""

    what: str
    value: str
    detail: str


@dataclass(frozen=True)
class BackendPackage:
    name: str  # the `backend` config group's entry, and its variants file conf/backends/<name>.yaml
    settings: type[BackendSettings]
    # What the command lines of the processes its servers run contain (the tests' leak checks look for them, beside
    # Ray's own: `experiments.cluster.connection.RAY_PROCESS_NAMES`).
    process_names: tuple[str, ...]
    # Facts of a node the backend decides by (each a frozen dataclass with a `KEY` and a `probe()` run on the node;
    # `NodeInfo.facts(kind)`). Packages may share one (the PyTorch servers share `TorchFacts`): it is probed once.
    facts: tuple[type[Any], ...] = ()
    # Its rows of the doctor's table (rows of the same `what` from several packages are shown once).
    doctor_rows: Callable[[NodeInfo], list[DoctorRow]] = lambda node: []
    # The extra of pyproject.toml that installs what it needs beyond tierbench's own dependencies (None: nothing more).
    extra: str | None = None
    # What a backend whose servers live in the Ray cluster itself (Ray Serve) asks of Ray: defaults of the environment
    # of a Ray node tierbench starts (cluster=local or emulated, `runners.node`; a user's own setting wins) ...
    ray_node_environment: Mapping[str, str] = field(default_factory=dict)
    # ... and of the cluster a sweep reaches (`experiments.cluster.connection`): environment variables the sweep's Ray
    # job sets for every process it starts, its actors included, from the cluster config (its switches,
    # `cluster.<key>`, settled by `BackendSettings.cluster_needs`) ...
    cluster_environment: Callable[[ClusterSwitches], dict[str, str]] = lambda switches: {}
    # ... and, on a running cluster the sweep joins (one it did not start), what it does while the sweep is there:
    # entered on joining, left when the sweep lets go of the cluster (stop what the sweep started there that would
    # outlive it).
    joined_cluster: Callable[[], AbstractContextManager[Any]] = nullcontext
    # The cluster-wide switches its settings may ask for (`BackendSettings.cluster_needs`): keys of the cluster config
    # (`cluster.<key>`, true, false or null: settled before anything starts, on when a backend of the experiment asks).
    cluster_switches: tuple[str, ...] = ()
    # The runtimes its servers compute in (`Backend.runtime`: a `serving.runtime.Engine`), each with the class that
    # times it in-process, no server around it (`serving.inprocess`, the GPU's ceiling): made with (model, runtime,
    # engine cache folder or None). Packages whose servers run the same runtime name the same class.
    runtime_callers: Mapping[str, Callable[[ModelConfig, Runtime, str | None], RuntimeCaller]] = \
        field(default_factory=dict)
    # What it writes beside a model exported to ONNX in the model repository so that its own server serves the folder
    # as is (`runners.export`): given the model, the ONNX file and the repository, the paths it wrote.
    exported: Callable[[ModelConfig, Path, Path], list[Path]] = lambda model, onnx_path, repository: []
