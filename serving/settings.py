"""Typed settings of a backend class: one dataclass per class, beside it, registered in Hydra's ConfigStore
(`experiments.config.schema`). Entries of conf/backends/ extend them, so a misspelt key or a value of the wrong
type fails when the config is composed; `check` refuses what a type cannot (ranges, allowed names, settings that
need each other), so every bad setting stops the sweep before anything starts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import MISSING, Field, asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from serving.model_config import ModelConfig

# The cluster-wide switches (`cluster.<key>` by key, each settled on or off before anything starts) a backend's
# settings are checked against.
ClusterSwitches = Mapping[str, bool]


def default_of(setting: Field[Any]) -> Any:
    """A settings field's default value (a fresh one where it has a factory)."""
    return setting.default_factory() if setting.default_factory is not MISSING else setting.default


@dataclass
class BackendSettings(ABC):
    """What every backend's settings carry: the class they configure and how long its start may take."""

    _target_: str = ""  # the Backend class these settings configure (each subclass names its own)
    start_timeout_s: float | None = None  # null: serving.start_timeout_s

    # The trial param `server_mode` before a server started (a skipped trial); a running server reports its own.
    server_mode_hint: ClassVar[str] = ""
    # What `experiment.search.space.<class>` may search: the settings that change how the server batches and
    # scales, not what it computes (experiments/run/settings_search.py).
    searchable: ClassVar[tuple[str, ...]] = ()
    # Settings that only take effect with a switch on: setting -> its switch (checked by `check`; a search space
    # that varies one needs the switch on, or searched too).
    switched_by: ClassVar[dict[str, str]] = {}
    # Settings a running server can take on in place, without a new process (Triton reloads one model with a new
    # `config.pbtxt`): a search's next candidate that changes only these takes the running server over
    # (`serving.backend.Backend.adopt`).
    reloadable: ClassVar[tuple[str, ...]] = ()
    # False for a server tierbench does not start (an endpoint): the tier's node then only hosts the clients.
    launches_server: ClassVar[bool] = True
    # The workloads its servers serve (serving/workloads/): an experiment of another refuses the entry.
    workloads: ClassVar[tuple[str, ...]] = ("image",)

    @property
    @abstractmethod
    def family(self) -> str:
        """The backend these settings measure (pytorch | triton_onnx | triton_trt | fastapi | torchserve | endpoint):
        the trial param `backend`, derived from the class and its settings rather than stated beside them."""

    def gpu_ask(self) -> tuple[str, float] | None:
        """The key of these settings and the share of a GPU one server asks Ray for on a node where Ray schedules
        GPUs, all its replicas together (servers sharing a card must fit on it); None where it asks for none."""
        return None

    def serves(self, workload: str) -> bool:
        """Whether its servers serve `workload`'s requests (`experiment.workload`)."""
        return workload in self.workloads

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        """What is wrong with `backends.<name>`: one message per problem, naming the key, the value and the fix."""
        if self.start_timeout_s is not None and self.start_timeout_s <= 0:
            return [self.refuse(name, "start_timeout_s", "seconds > 0, or null for serving.start_timeout_s")]
        return []

    def cluster_needs(self) -> dict[str, bool]:
        """Cluster-wide switches these settings need on (`cluster.<key>`): a key the user left null is turned on
        when a backend of the experiment needs it."""
        return {}

    def refuse_batch_sizes(self, name: str, batch_sizes: list[int]) -> list[str]:
        """What is wrong with these settings for requests of `batch_sizes` images (`experiment.batch_sizes`)."""
        return []

    def refuse_loads(self, name: str, concurrency: int, rate: float) -> list[str]:
        """What is wrong with the experiment's highest load for these settings: `concurrency` requests in flight
        (closed loop; 0: none) or `rate` requests/s (open loop; 0: none), the SLO search's limits included."""
        return []

    def refuse_max_batch_size(self, name: str, model: ModelConfig, meaning: str) -> list[str]:
        """A `max_batch_size` setting (where a backend has one) outside 1..model.max_batch_size, the largest batch
        the model is exported for; `meaning` says what the setting bounds and what null means."""
        value = getattr(self, "max_batch_size", None)
        limit = int(model.max_batch_size)
        if value is None or (is_positive_int(value) and value <= limit):
            return []
        return [self.refuse(name, "max_batch_size", f"in 1..model.max_batch_size={limit} {meaning}")]

    def as_served(self, model: ModelConfig) -> dict[str, Any]:
        """Every setting as the server runs it: a null `max_batch_size` (where a backend has one) is the model's."""
        values = asdict(self)
        if values.get("max_batch_size", 0) is None:
            values["max_batch_size"] = int(model.max_batch_size)
        return values

    def refuse(self, name: str, key: str, allowed: str) -> str:
        return f"backends.{name}.{key}={getattr(self, key)!r} is not allowed: {allowed}"

    def refuse_unless(self, name: str, switch: str, keys: list[str]) -> list[str]:
        """Settings given values that only take effect when `switch` is on, while it is off."""
        if getattr(self, switch):
            return []
        return [self.refuse(name, key, f"it only applies with {switch}=true; set that, or leave {key} out")
                for key in keys]

    def refuse_switched_off(self, name: str) -> list[str]:
        """`refuse_unless` for every switch of `switched_by`: the settings given values other than their defaults
        while their switch is off."""
        defaults = {f.name: default_of(f) for f in fields(self)}
        problems = []
        for switch in dict.fromkeys(self.switched_by.values()):
            problems += self.refuse_unless(name, switch, [k for k, s in self.switched_by.items()
                                                          if s == switch and getattr(self, k) != defaults[k]])
        return problems

    def reloadable_from(self, running: BackendSettings) -> bool:
        """Whether a server started with `running` can serve these settings by reloading in place: the same class,
        differing only in `reloadable` settings."""
        if type(running) is not type(self):
            return False
        fixed = [key for key in asdict(self) if key not in self.reloadable]
        return all(getattr(self, key) == getattr(running, key) for key in fixed)

    def identity(self) -> dict[str, Any]:
        """Every setting and the family: what a trial's identity key hashes (for resume and deduplication)."""
        return {"backend": self.family, **asdict(self)}


@dataclass
class OneGpuServerSettings(BackendSettings):
    """A server Ray places as one process (Triton, FastAPI, TorchServe): the share of a GPU it asks for."""

    num_gpus: float = 0.5  # asked of Ray on nodes where it schedules GPUs (pins the server to one GPU)

    def gpu_ask(self) -> tuple[str, float] | None:
        return "num_gpus", float(self.num_gpus)

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if self.num_gpus < 0:
            problems.append(self.refuse(name, "num_gpus", "a share of a GPU >= 0 (0: ask Ray for none)"))
        return problems


def is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
