"""Typed schemas for the Hydra config tree (`conf/`), registered in Hydra's ConfigStore: the whole config
(`TierbenchConfig`) and its parts. A part with a module of its own is defined there, with its rules (the experiment's
in `experiments.config.experiment`, `experiment.inputs` in `.inputs`, `experiment.search` in `.search`, `gpu.owned`
in `.owned`, `capacity` in `.capacity`); this module's namespace holds every part.

YAML files extend these schemas through their defaults list (`- base_gpu`, ...; an entry of conf/backends/
with `- /backend/<class>@<name>`), so a misspelt key or a value of the wrong type fails when the config is
composed. What types cannot express (allowed names, ranges, values that need each other) each part checks itself
(`experiments.config.checks.Checked`; `experiments.config.validation.validate` walks the tree), and the backend
settings classes (`serving/*/settings.py`) theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from experiments.config.capacity import CapacityConfig
from experiments.config.checks import Checked, refused_by
from experiments.config.choices import ClientPlacement
from experiments.config.errors import refuse
from experiments.config.experiment import (  # noqa: F401 - the parts of `experiment`, in the schema's namespace
    ArrivalsConfig,
    ExperimentConfig,
    SloConfig,
    StabilityConfig,
    highest_load,
)
from experiments.config.inputs import AccuracyConfig, InputsConfig  # noqa: F401 - the schema's namespace
from experiments.config.model_check import check_model
from experiments.config.owned import OwnedConfig
from experiments.config.prices import check_prices
from experiments.config.search import SearchConfig, check_search  # noqa: F401 - the schema's namespace
from experiments.config.shares import check_share, tenants
from experiments.config.workloads import check_prompts
from serving.model_config import ModelConfig, ServedModel
from serving.registry import backend_settings, cluster_switches
from serving.settings import BackendSettings
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.registry import workloads

# The `backend` config group: one schema per backend package (serving/registry.py), named in conf/backends/ as
# `/backend/<name>@<entry>`.
BACKEND_SCHEMAS: dict[str, type[BackendSettings]] = backend_settings()


# A node of tier <name> declares the Ray resource `tier_<name>` (experiments.cluster.tiers), and so does a node type
# of the autoscaler that offers the tier (experiments.config.autoscaling).
RESOURCE_PREFIX = "tier_"
# One per node that declares tiers (and per node type that offers them): a tier job's lease takes it whole, so two
# tiers of one node (a card and the card shared by servers, `local` and the machine's GPU tier) are measured one
# after the other, never over each other.
NODE_LOCK_RESOURCE = "tierbench_node"


@dataclass
class GpuTierConfig(Checked):
    """A GPU tier: what it is called, what it costs and how its nodes are recognised."""

    name: str = MISSING  # the tier's name: `gpu=<name>`, the node resource `tier_<name>`, trial param `gpu_tier`
    display_name: str = MISSING  # the GPU as the report names it
    # The primary price: trial param `price_per_hour_usd` and the cost metrics use it.
    price_per_hour_usd: float = MISSING
    price_source: str = ""  # where the primary price was seen (provider, offer, link)
    price_seen: str = ""  # when it was seen: prices go stale
    # The primary price is yours: `python -m runners.prices --primary` leaves it as it is (an alternative price is
    # kept the same way with `pinned: true` in its entry)
    price_pinned: bool = False
    # Alternative prices by name, each {usd_per_hour, kind, provider, source, seen, pinned} (see
    # experiments.config.prices; an untyped dict so `+gpu.prices.mine={usd_per_hour:0.2}` works on the command line;
    # checked by validate()).
    prices: dict[str, Any] = field(default_factory=dict)
    requires_gpu: bool = True  # a node declaring this tier must have a GPU of its identity (gpu_names, gpu_memory_gib)
    # The tier's identity: the GPU's exact NVML names (as nvidia-smi --query-gpu=name prints them; case and spacing
    # aside), e.g. ["NVIDIA H100 80GB HBM3"], so an SXM card is never priced as a PCIe one
    gpu_names: list[str] = field(default_factory=list)
    # ... and its total memory in GiB as NVML reports it, [low, high] inclusive (checked where known); []: any
    gpu_memory_gib: list[float] = field(default_factory=list)
    # A MIG slice of a card (docs/gpu-nodes.md, "MIG slices"): its profile as `nvidia-smi -L` names it, e.g.
    # "1g.10gb"; its gpu_names are then the MIG devices' NVML names ("<the card's name> MIG 1g.10gb") and
    # gpu_memory_gib the slice's memory. null: a whole card (refused on a card in MIG mode)
    mig_profile: str | None = None
    # The share of one card the tier is, in (0, 1]: 1 for a whole card, 1/7 (0.14285714) for a 1g.10gb slice of an
    # H100 (one of its 7 compute slices); logged with the trials (param gpu_share). Without a mig_profile, 1/N is a
    # card shared by N servers at once: each trial runs N copies of its server on the card, each under the trial's
    # load, and is priced at this share (docs/gpu-nodes.md, "Shared cards")
    gpu_share: float = 1.0
    # The tier of the whole card it is a share of (e.g. h100_sxm): its price x gpu_share is this tier's price, and
    # the report sets the two side by side; null for a whole card
    share_of: str | None = None
    # A CPU tier's identity (requires_gpu: false): the node's logical CPUs, and no GPU (its GPU variants would be
    # priced as a CPU node); null: any machine (`local`)
    cpus: int | None = None
    owned: OwnedConfig = field(default_factory=OwnedConfig)  # rent vs own: the report prices the tier both ways

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """Its prices (experiments.config.prices), its identity, and what a share of a card says it is
        (experiments.config.shares)."""
        price = self.price_per_hour_usd
        if price is None or not isinstance(price, int | float) or price < 0:
            return [refuse(f"{key}.price_per_hour_usd", price, "set a price >= 0 in USD per hour for this tier")]
        return check_prices(self, key) or self._check_identity(key) or check_share(self, key)

    def _check_identity(self, key: str) -> list[str]:
        """A GPU tier names its GPU exactly; its memory bounds, where given, are a range; a CPU tier's CPUs are a
        count."""
        if self.requires_gpu and not self.gpu_names:
            return [refuse(f"{key}.gpu_names", [], "a GPU tier names its GPU: its NVML names as nvidia-smi "
                                                   "--query-gpu=name prints them (or requires_gpu=false for a CPU "
                                                   "tier)")]
        if self.cpus is not None and (self.requires_gpu or not isinstance(self.cpus, int) or self.cpus <= 0):
            return [refuse(f"{key}.cpus", self.cpus, "a CPU tier's logical CPUs, a positive integer, with "
                                                     "requires_gpu=false (or null)")]
        memory = list(self.gpu_memory_gib)
        if memory and (len(memory) != 2 or not 0 < memory[0] <= memory[1]):
            return [refuse(f"{key}.gpu_memory_gib", memory, "give [low, high] in GiB with 0 < low <= high, or [] for "
                                                            "any")]
        return []


@dataclass
class EmulatedNodeConfig:
    """One node of an emulated cluster: the tier it declares, or a client-pool node."""

    tier: str | None = None  # the tier this node declares (null: none, e.g. a client-pool node)
    client_pool: bool = False  # a load generator for clients.placement=separate
    num_cpus: int = 1  # the CPUs it declares (it shares this machine's)


@dataclass
class ClusterConfig(Checked):
    """How the sweep reaches Ray: start one (local, emulated) or join one (address)."""

    name: str = MISSING  # local | emulated | address: the file of conf/cluster/
    address: str | None = None  # address: `auto` (this machine is a node of it) or HEAD_IP:6379; null: start one
    # local: the node's CPUs (null: all cores); emulated: the head node's CPUs (the sweep jobs need none)
    num_cpus: int | None = None
    object_store_memory: int | None = None  # per node the sweep starts
    # Results from this cluster are tagged emulated=true (also when a node declares the emulated marker).
    emulated: bool = False
    nodes: list[EmulatedNodeConfig] = field(default_factory=list)  # emulated: the worker nodes to start
    # Wait this long for a node of the tier that another sweep holds before giving up; also the bound on
    # waiting for a replacement of a lost node (replace_lost_node).
    lease_timeout_s: float = 3600.0
    # A tier whose node is lost mid-sweep (a spot instance taken back) waits for another node of the tier to join
    # (the autoscaler, or `runners.node` run again) and finishes the sweep there. Off: its trials not yet run are
    # recorded `failed` ("not run: node ... was lost"), with the resume command printed.
    replace_lost_node: bool = False
    # On a cluster with an autoscaler, a tier with no live node but a node type declaring its tier resource asks
    # the autoscaler for a node (the tier job's pending lease) and waits this long for it; then that tier fails.
    scale_up_timeout_s: float = 900.0
    # The cluster config the autoscaler runs (a Ray cluster YAML as `ray up` takes, or a KubeRay RayCluster), on
    # this machine: its node types say which tiers can be started. null: ~/ray_bootstrap_config.yaml on the head.
    autoscaling_config: str | None = None
    # An actor or replica still pending after this long fails with what it asked for and what the node has.
    schedule_timeout_s: float = 60.0
    # Ray Serve's direct ingress (alpha in Ray 2.60): every replica also serves HTTP/gRPC on its own port,
    # which backends with `direct_ingress: true` (pytorch_direct) measure. Cluster-wide, for the Serve this
    # sweep starts (set in the job's runtime env); Serve's proxy keeps working for the other backends. null: on when
    # a backend of the experiment asks for it (validation settles it before anything starts).
    serve_direct_ingress: bool | None = None
    # Ray Serve's HAProxy ingress (Ray's high-throughput mode): HAProxy, a load balancer in C, takes the place of
    # Serve's Python proxies on their ports and sends each request straight to a replica's own port (direct ingress
    # comes on with it), which backends with `haproxy: true` (pytorch_haproxy) measure. Cluster-wide like
    # serve_direct_ingress, but it replaces the proxies: backends through Serve's proxy (pytorch) are refused
    # beside it. null: on when a backend of the experiment asks for it.
    serve_haproxy: bool | None = None

    def switches(self) -> dict[str, bool]:
        """The switches backends ask for (`BackendPackage.cluster_switches`), as validation settled them: what
        `BackendSettings.check` reads."""
        return {key: bool(getattr(self, key)) for key in cluster_switches()}

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        from experiments.config.autoscaling import load_autoscaling

        for name in ("lease_timeout_s", "scale_up_timeout_s", "schedule_timeout_s"):
            if getattr(self, name) <= 0:
                return [refuse(f"{key}.{name}", getattr(self, name), "a time in seconds > 0")]
        if self.autoscaling_config:  # the file exists and names node types
            return refused_by(load_autoscaling, str(self.autoscaling_config))
        return []


@dataclass
class ClientsConfig(Checked):
    """Where the load comes from: `colocated` on the tier's node, or `separate` on a client-pool node."""

    placement: str = "colocated"  # ClientPlacement

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if self.placement not in list(ClientPlacement):
            return [refuse(f"{key}.placement", self.placement, f"choose from {[str(p) for p in ClientPlacement]}")]
        return []


@dataclass
class ToleranceConfig(Checked):
    """How far a backend's logits may be from the PyTorch reference's and still count as the same function."""

    max_abs_diff: float = MISSING  # the largest absolute difference of a logit from the reference's
    min_top1_agreement: float = MISSING  # the least share of images whose top-1 class matches the reference's

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if self.max_abs_diff < 0:
            return [refuse(f"{key}.max_abs_diff", self.max_abs_diff, "must be >= 0")]
        if not 0 <= self.min_top1_agreement <= 1:
            return [refuse(f"{key}.min_top1_agreement", self.min_top1_agreement, "must be a fraction in [0, 1]")]
        return []


@dataclass
class CrosscheckConfig(Checked):
    """The cross-check of each server group against the PyTorch reference before it is measured
    (experiments/run/crosscheck.py)."""

    enabled: bool = True  # off: groups are measured unchecked
    images: int = 8  # images in the one request sent through each path
    # by the arithmetic a backend computes in (Backend.numerics): fp32 | fp16 | bf16 | int8
    tolerances: dict[str, ToleranceConfig] = field(default_factory=dict)

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """Its size, and a tolerance for every arithmetic a backend computes in (each checks its own values)."""
        if self.images < 1:
            return [refuse(f"{key}.images", self.images, "must be a positive integer")]
        for numerics in NUMERICS:
            if numerics not in self.tolerances:
                return [refuse(f"{key}.tolerances.{numerics}", None, "give max_abs_diff and min_top1_agreement")]
        return []


# The arithmetic a backend computes in (`serving.backend.Backend.numerics`): each has its cross-check tolerance.
NUMERICS = ("fp32", "fp16", "bf16", "int8")


@dataclass
class MlflowConfig:
    """Where the sweep logs its runs (only the driver writes to MLflow)."""

    experiment: str = "tierbench"  # the MLflow experiment
    tracking_uri: str | None = None  # null: $MLFLOW_TRACKING_URI when set, else sqlite:///<cwd>/mlflow/mlflow.db


@dataclass
class ServingConfig:
    """How servers are reached, started and stopped."""

    # Address servers bind to and clients connect to; keep loopback unless clients run on other nodes (0.0.0.0: every
    # interface, clients use the node's address).
    host: str = "127.0.0.1"
    start_timeout_s: float = 180.0  # a server not ready by then fails its trials (a backend's own start_timeout_s wins)
    stop_timeout_s: float = 20.0  # how long a server is given to stop


@dataclass
class TelemetryConfig(Checked):
    """Telemetry of the server's node during each measurement window: its CPU, and its GPUs through NVML (nothing of
    those on CPU-only nodes)."""

    gpu: bool = True  # gpu_util_pct, gpu_mem_used_mb, gpu_power_w, gpu_energy_j, energy_per_image_j per trial
    # node_cpu_util_pct, node_cpu_cores_busy per trial (every process on the node, clients included), and the server's
    # own processes' CPU and busiest thread (server_cpu_cores, server_thread_cpu_max)
    cpu: bool = True
    sample_hz: float = 20.0  # NVML samples per second

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if self.sample_hz <= 0:
            return [refuse(f"{key}.sample_hz", self.sample_hz, "must be > 0 (NVML samples per second, e.g. 20)")]
        return []


@dataclass
class CeilingConfig(Checked):
    """The GPU's own ceiling (experiments/measure/ceiling.py): before a tier's trials, each runtime its servers run is
    timed in-process on the tier's node, and every trial is set against it (docs/ceiling.md)."""

    enabled: bool = True  # off: no in-process timing, no efficiency figures or verdicts
    min_time_s: float = 0.5  # each batch size and mode is timed for at least this long ...
    min_calls: int = 5  # ... and at least this many calls
    cache: bool = True  # reuse the node's timing of the same model, runtime and versions (false: retime, replacing it)
    cache_dir: str | None = None  # null: ~/.cache/tierbench/ceiling on the node
    timeout_s: float = 900.0  # the whole timing on a node (torch.compile and TensorRT builds happen inside it)

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        for name in ("min_time_s", "timeout_s"):
            if getattr(self, name) <= 0:
                return [refuse(f"{key}.{name}", getattr(self, name), f"a time in seconds > 0 (or {key}.enabled=false: "
                                                                     "no ceiling)")]
        if self.min_calls < 1:
            return [refuse(f"{key}.min_calls", self.min_calls, "a positive number of calls, e.g. 5")]
        return []


@dataclass
class TierbenchConfig(Checked):
    """The whole config: one sweep is one GPU tier x the experiment matrix."""

    gpu: GpuTierConfig = MISSING
    # the model measured: an image model (conf/model/ files on base_model) or a language model (base_language_model)
    model: ServedModel = MISSING
    experiment: ExperimentConfig = MISSING
    cluster: ClusterConfig = MISSING
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    # entry name -> the typed settings of the class that serves it (conf/backends/, BACKEND_SCHEMAS: a subclass of
    # BackendSettings each)
    backends: dict[str, BackendSettings] = field(default_factory=dict)
    sweep_id: str = MISSING  # names the sweep across tiers (MLflow tag, results folder); the same one resumes it
    results_dir: str = "runs"  # raw per-trial results are written here before they are logged to MLflow
    quiet: bool = False  # no progress bar (the per-trial log lines stay); it is also off when stderr is no terminal
    report: bool = True   # the sweep ends by writing its report and printing the answer
    capacity: CapacityConfig = field(default_factory=CapacityConfig)  # the report's capacity plan for a traffic
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    ceiling: CeilingConfig = field(default_factory=CeilingConfig)
    crosscheck: CrosscheckConfig = field(default_factory=CrosscheckConfig)

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """The rules between the parts, each checked by now: the cluster's switches settled from the experiment's
        backends, then each of those entries (its class, its own checks against the model, the switches, the batch
        sizes and the highest load), the servers sharing a card, the settings search (experiments.config.search)."""
        self._settle_cluster_switches()
        for name in self.experiment.backends:
            problems = self._check_backend(name)
            if problems:
                return problems
        return self._check_tenancy() or check_search(self)

    def check_loaded(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """Last: it loads and runs the model the user brings (experiments.config.model_check), or builds a generative
        sweep's prompts with the model's tokenizer (experiments.config.workloads.check_prompts)."""
        if workloads()[self.experiment.workload].image_model:
            return refused_by(check_model, self.model)
        return refused_by(check_prompts, self)

    def _settle_cluster_switches(self) -> None:
        """A cluster switch left null (`cluster.serve_direct_ingress`) is turned on when a backend of the experiment
        needs it (`BackendSettings.cluster_needs`), else off, before anything starts."""
        needs: dict[str, bool] = {}
        for name in self.experiment.backends:
            for switch, value in self.backends[name].cluster_needs().items():
                needs[switch] = needs.get(switch, False) or value
        for switch in cluster_switches():
            if getattr(self.cluster, switch) is None:
                setattr(self.cluster, switch, needs.get(switch, False))

    def _check_backend(self, name: str) -> list[str]:
        """`backends.<name>`: the class its settings name, and the settings' own checks, before any server starts."""
        from hydra.utils import get_class

        settings = self.backends[name]
        try:
            get_class(settings._target_)
        except Exception as exc:  # noqa: BLE001 - any import failure is a bad _target_
            return [f"backends.{name}._target_={settings._target_!r} cannot be imported ({exc}): name a Backend "
                    "class, e.g. serving.triton.backend.TritonBackend"]
        return [*settings.check(name, self.model, self.cluster.switches()),
                *settings.refuse_batch_sizes(name, list(self.experiment.batch_sizes)),
                *settings.refuse_loads(name, *highest_load(self.experiment))]

    def _check_tenancy(self) -> list[str]:
        """A shared card's tier starts its servers side by side on the card: each one tierbench's, each fitting its
        share of the GPU Ray schedules."""
        count = tenants(self.gpu)
        if count == 1:
            return []
        names = list(self.experiment.backends)
        foreign = [n for n in names if not self.backends[n].launches_server]
        if foreign:
            return [refuse("experiment.backends", foreign, f"tier {self.gpu.name} is a card shared by {count} servers "
                           "tierbench starts on it, and an endpoint is a server it does not start: measure the "
                           "endpoint on a whole card's tier, or drop it here")]
        if not self.gpu.requires_gpu:
            return []
        for name in names:
            ask = self.backends[name].gpu_ask()
            if ask is not None and ask[1] * count > 1 + 1e-9:
                return [refuse(f"backends.{name}.{ask[0]}", ask[1], f"each of the {count} servers sharing the card on "
                               f"tier {self.gpu.name} asks Ray for this share of it (all its replicas together): at "
                               f"most 1/{count} (e.g. backends.{name}.{ask[0]}={1 / count:.4g})")]
        return []


def register_configs() -> None:
    """Register the schemas; YAML files name them in their defaults lists."""
    cs = ConfigStore.instance()
    cs.store(name="tierbench_schema", node=TierbenchConfig)
    cs.store(group="gpu", name="base_gpu", node=GpuTierConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="model", name="base_language_model", node=LanguageModelConfig)
    cs.store(group="experiment", name="base_experiment", node=ExperimentConfig)
    cs.store(group="cluster", name="base_cluster", node=ClusterConfig)
    for name, schema in BACKEND_SCHEMAS.items():
        cs.store(group="backend", name=name, node=schema)
    # What conf/backends/default.yaml pulls in: every registered backend's variants file, conf/backends/<name>.yaml.
    cs.store(group="backends", name="registered", node={"defaults": [*BACKEND_SCHEMAS, "_self_"]})


register_configs()
