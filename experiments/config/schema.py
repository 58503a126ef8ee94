"""Typed schemas for the Hydra config tree (`conf/`), registered in Hydra's ConfigStore.

YAML files extend these schemas through their defaults list (`- base_gpu`, ...; an entry of conf/backends/
with `- /backend/<class>@<name>`), so a misspelt key or a value of the wrong type fails when the config is
composed. Rules that types cannot express (allowed names, positive sizes) live in
`experiments.config.validation`; the backend settings classes (`serving/*/settings.py`) check their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from serving.model_config import ModelConfig, ServedModel
from serving.registry import backend_packages
from serving.settings import BackendSettings
from serving.workloads.generative.config import PromptsConfig
from serving.workloads.generative.model import LanguageModelConfig

# The `backend` config group: one schema per backend package (serving/registry.py), named in conf/backends/ as
# `/backend/<name>@<entry>`.
BACKEND_SCHEMAS: dict[str, type[BackendSettings]] = {name: p.settings for name, p in backend_packages().items()}


# A node of tier <name> declares the Ray resource `tier_<name>` (experiments.cluster.tiers), and so does a node type
# of the autoscaler that offers the tier (experiments.config.autoscaling).
RESOURCE_PREFIX = "tier_"
# One per node that declares tiers (and per node type that offers them): a tier job's lease takes it whole, so two
# tiers of one node (a card and the card shared by servers, `local` and the machine's GPU tier) are measured one
# after the other, never over each other.
NODE_LOCK_RESOURCE = "tierbench_node"


@dataclass
class OwnedConfig:
    """The tier priced as hardware you own instead of rent (experiments.config.owned): the purchase amortised over
    the hours it serves, plus the energy it draws while serving. Off until `hardware_usd` is set."""

    hardware_usd: float | None = None  # what one node cost to buy (its GPUs, host, a share of the rack); null: off
    life_years: float = 3.0  # years the purchase is written off over
    utilisation: float = 0.5  # the share of those years the node serves at the measured throughput
    usd_per_kwh: float = 0.15  # electricity, cooling included (a data centre's PUE times its tariff)
    host_watts: float = 0.0  # the node's draw beyond its GPUs' measured power (CPUs, fans); a CPU node's whole draw
    source: str = ""  # where the purchase price and tariff come from


@dataclass
class GpuTierConfig:
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


@dataclass
class StabilityConfig:
    """perf_analyzer's rule: repeat windows until the last `windows` agree within `percent` on throughput and
    on the chosen latency percentile (at most `max_windows`)."""

    percent: float = 10.0  # how far apart (%) the agreeing windows may be on throughput and the latency percentile
    windows: int = 3  # how many of the last windows must agree
    max_windows: int = 10  # stop there, agreed or not (the trial is then tagged stable=false)
    latency_percentile: int = 95  # the latency percentile the windows must agree on
    # each window holds at least this many completed requests: one that holds fewer goes on into the next, measured
    # as one longer window (up to 8 x window_s), before windows are compared (LoadGen's minimum query count); 0: every
    # window is window_s long, whatever it holds
    min_requests: int = 0


@dataclass
class SloConfig:
    """Find the highest load whose p99 stays within `p99_ms` (null: no search); a generative sweep's targets are its
    time to first token and time per output token (`ttft_p99_ms`, `tpot_p99_ms`)."""

    p99_ms: float | None = None  # the p99 target (ms); null: no search
    # Generative: the time to first token's p99 target (ms), and each request's bound for goodput; null: none
    ttft_p99_ms: float | None = None
    # Generative: the time per output token's p99 target (ms), and each request's bound for goodput; null: none
    tpot_p99_ms: float | None = None
    # A request answered later than this (ms) is not good: goodput counts the requests answered well within it
    # (null: within p99_ms, where set; with neither, no goodput)
    deadline_ms: float | None = None
    # The search also keeps goodput at least this share of the requests offered (e.g. 0.99: at most 1 % failed or
    # late); null: the p99 rule alone
    min_goodput_share: float | None = None
    max_concurrency: int = 64  # the search's highest concurrency (closed loop)
    max_rate: float = 2000.0  # the search's highest request rate, req/s (open loop)


@dataclass
class ArrivalsConfig:
    """The open-loop shapes beyond constant and Poisson (experiment.load_mode; docs/traffic.md)."""

    cv: float = 3.0  # gamma: the gaps' coefficient of variation (1: Poisson; above: burstier)
    burst_on_s: float = 0.25  # bursts: seconds of arrivals at the burst rate, ...
    burst_off_s: float = 0.75  # ... then seconds of none, over and over; the trial's rate is the mean over both
    ramp_steps: int = 8  # ramp: the rate rises in this many steps, one measurement window each, ...
    ramp_start: float = 0.125  # ... from this share of the trial's rate (its peak) to all of it


@dataclass
class SearchConfig:
    """Search each backend's server settings for the highest throughput within `slo.p99_ms`
    (experiments/run/settings_search.py). `space`: per backend class (`triton`, `ray_serve`), setting -> the values
    to try; a backend's own name in place of its class's gives it a space of its own; a backend with neither is
    measured at its own settings."""

    strategy: str = "none"  # SearchStrategy: none | grid | quick
    space: dict[str, Any] = field(default_factory=dict)  # backend class (or name) -> setting -> the values to try


@dataclass
class InputsConfig:
    """What requests carry (serving.workloads.image.corpus; docs/inputs.md): distinct images, sent in turn."""

    # `synthetic` (built-in, seeded) | a folder of JPEG, PNG, WebP images (at the same path on the clients' node)
    source: str = "synthetic"
    labels: str | None = None  # a CSV of `file,class index` for the folder's images: each backend's accuracy
    synthetic_images: int = 512  # the synthetic corpus's size
    seed: int = 0  # the synthetic corpus's seed
    pool_mib: float = 64.0  # each client's distinct requests stop at this much payload (a window may repeat them)
    # The caching audit: each operating point measured twice, with distinct inputs and with one input repeated
    audit: bool = False
    audit_max_speedup: float = 0.10  # a stack whose repeated input's p50 is faster by more than this share is flagged


@dataclass
class AccuracyConfig:
    """How close to the FP32 reference a variant must stay to be chosen (docs/inputs.md, "Accuracy")."""

    # Points of top-1 a variant may lose against the FP32 reference (on the labelled corpus; without labels, its
    # top-1 disagreement with the reference's, in percent); over it a variant is measured and shown, never chosen.
    # null: no bound (the accuracy pass runs only where the corpus has labels).
    max_top1_drop: float | None = None
    images: int = 512  # corpus images each (protocol, input format) path is evaluated on before its group is measured


@dataclass
class ExperimentConfig:
    """The trial matrix and how each trial is measured."""

    name: str = MISSING  # the experiment's name, logged with its trials
    # What is sent and in what unit it is priced (serving/workloads/): image (images, $ per 1k images) | generative
    # (conversations to an OpenAI-compatible server, $ per 1M tokens). The model must be of it (conf/model/)
    workload: str = "image"
    backends: list[str] = field(default_factory=list)  # entries of conf/backends/ to measure (`backends.<entry>`)
    # http | grpc; for Triton with the client on the server's machine also http_shm, grpc_shm (system shared memory)
    # and http_cuda_shm, grpc_cuda_shm (GPU)
    protocols: list[str] = field(default_factory=list)
    # image: tensor | jpeg | jpeg_base64 (base64 JPEGs in JSON); generative: chat_stream | completions_stream (every
    # token timed) | chat | completions (answered whole)
    input_formats: list[str] = field(default_factory=list)
    # images per request, each at most model.max_batch_size (generative: [1], one conversation per request)
    batch_sizes: list[int] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)  # closed loop: request loops in flight, one trial each
    # Only these stacks, `variant/protocol/input_format` (e.g. fastapi/http/jpeg_base64), instead of every combination
    # of backends x protocols x input formats; each part must be listed in its key above.
    stacks: list[str] = field(default_factory=list)
    # TrialMatrix: full (every batch size at every load) | axes (batch sizes at the lowest load, loads at the
    # smallest batch size: the studies' serial-latency and concurrent-throughput tables)
    matrix: str = "full"
    # LoadMode: closed, `concurrency` request loops; constant | poisson | gamma | bursts, open loop at each of
    # `request_rates` (req/s, the mean); ramp, rising to each of `request_rates` over `arrivals.ramp_steps` windows;
    # trace, open loop following `trace`, each of `request_rates` its peak (docs/traffic.md, docs/trace-replay.md)
    load_mode: str = "closed"
    arrivals: ArrivalsConfig = field(default_factory=ArrivalsConfig)  # the shapes of gamma, bursts and ramp
    request_rates: list[float] = field(default_factory=list)  # open loop: req/s, one trial each (trace: the peak)
    # load_mode=trace: a CSV of arrival times (header arrival_s) or of requests/s per step (header rate_per_s), e.g.
    # conf/traces/diurnal_example.csv (SYNTHETIC). Its whole span is replayed in each window_s, looped; its busiest
    # step at the trial's rate.
    trace: str | None = None
    max_in_flight: int = 1024  # open loop: requests outstanding at most; later ones are sent late (late_requests)
    # Warm-up ends once both are reached; its requests are dropped from the measurement.
    warmup_requests: int = 10
    warmup_s: float = 1.0  # seconds of warm-up (with warmup_requests, both must pass)
    window_s: float = 5.0  # length of one measurement window, seconds
    request_timeout_s: float = 60.0  # a request not answered within it fails (outcome `timeout`)
    # The share of a trial's requests that may fail (an error status, a timeout, a lost connection:
    # serving.clients.outcomes) before the trial fails; its figures are kept either way, errors by class included
    max_error_rate: float = 0.01
    # Longest a trial may take from load start to the end of its window; beyond it the trial fails.
    trial_timeout_s: float = 600.0
    # A trial whose server failed under it (a crashed or unhealthy process: the Python backend's stub declares
    # itself unhealthy when starved of CPU for a second, also when the server answered the trial's other requests)
    # is measured again this many times on a fresh server. The
    # failed attempt stays logged, tagged `retried`; the new one carries `attempt` and the earlier reason.
    trial_retries: int = 1
    # Measure each trial this many times (1: once). With more, the trial's figures pool its repeats and each gets a
    # 95 % interval (docs/confidence-intervals.md); every repeat is an MLflow run nested under its trial's run.
    repeats: int = 1
    # Each repeat after the first on a fresh server process (stopped and started again): its start-up and memory
    # layout become part of the spread. Off: every repeat on the server already running.
    repeat_fresh_server: bool = False
    stability: StabilityConfig = field(default_factory=StabilityConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    # Client actors share a trial's load, each with its own async client and connections. 0: automatic, one
    # actor per `client_concurrency_per_actor` loops, more when an actor's CPU passes `client_cpu_limit`.
    client_actors: int = 0
    max_client_actors: int = 4  # automatic actors stop here
    client_concurrency_per_actor: int = 16  # request loops per actor when client_actors is automatic
    client_cpu_limit: float = 0.8  # share of a core an actor may use before another is added (else client_bound)
    client_num_cpus: float = 0.1  # CPUs each client actor asks of Ray
    # LoadEngine: what sends the requests. auto: the compiled engine (C, experiments/measure/engine/loadgen.c) wherever
    # it builds and speaks the trial's protocol, else the Python client; compiled: only it (a trial it cannot measure
    # is refused); python: the actors' asyncio client. Every trial records the engine that measured it.
    load_engine: str = "auto"
    inputs: InputsConfig = field(default_factory=InputsConfig)  # the images requests carry (docs/inputs.md)
    # the conversations generative requests carry and their lengths (docs/generative.md)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)  # top-1 against the reference, and its bound


@dataclass
class EmulatedNodeConfig:
    """One node of an emulated cluster: the tier it declares, or a client-pool node."""

    tier: str | None = None  # the tier this node declares (null: none, e.g. a client-pool node)
    client_pool: bool = False  # a load generator for clients.placement=separate
    num_cpus: int = 1  # the CPUs it declares (it shares this machine's)


@dataclass
class ClusterConfig:
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
        """The switches backends are checked against (`BackendSettings.check`), as validation settled them."""
        return {key: bool(getattr(self, key)) for key in CLUSTER_SWITCHES}


# ClusterConfig's switches a backend can ask for (`BackendSettings.cluster_needs`); null ones are settled by validation.
CLUSTER_SWITCHES = ("serve_direct_ingress", "serve_haproxy")


@dataclass
class ClientsConfig:
    """Where the load comes from: `colocated` on the tier's node, or `separate` on a client-pool node."""

    placement: str = "colocated"  # ClientPlacement


@dataclass
class ToleranceConfig:
    """How far a backend's logits may be from the PyTorch reference's and still count as the same function."""

    max_abs_diff: float = MISSING  # the largest absolute difference of a logit from the reference's
    min_top1_agreement: float = MISSING  # the least share of images whose top-1 class matches the reference's


@dataclass
class CrosscheckConfig:
    """The cross-check of each server group against the PyTorch reference before it is measured
    (experiments/run/crosscheck.py)."""

    enabled: bool = True  # off: groups are measured unchecked
    images: int = 8  # images in the one request sent through each path
    # by the arithmetic a backend computes in (Backend.numerics): fp32 | fp16 | bf16 | int8
    tolerances: dict[str, ToleranceConfig] = field(default_factory=dict)


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
class TelemetryConfig:
    """Telemetry of the server's node during each measurement window: its CPU, and its GPUs through NVML (nothing of
    those on CPU-only nodes)."""

    gpu: bool = True  # gpu_util_pct, gpu_mem_used_mb, gpu_power_w, gpu_energy_j, energy_per_image_j per trial
    # node_cpu_util_pct, node_cpu_cores_busy per trial (every process on the node, clients included), and the server's
    # own processes' CPU and busiest thread (server_cpu_cores, server_thread_cpu_max)
    cpu: bool = True
    sample_hz: float = 20.0  # NVML samples per second


@dataclass
class CeilingConfig:
    """The GPU's own ceiling (experiments/measure/ceiling.py): before a tier's trials, each runtime its servers run is
    timed in-process on the tier's node, and every trial is set against it (docs/ceiling.md)."""

    enabled: bool = True  # off: no in-process timing, no efficiency figures or verdicts
    min_time_s: float = 0.5  # each batch size and mode is timed for at least this long ...
    min_calls: int = 5  # ... and at least this many calls
    cache: bool = True  # reuse the node's timing of the same model, runtime and versions (false: retime, replacing it)
    cache_dir: str | None = None  # null: ~/.cache/tierbench/ceiling on the node
    timeout_s: float = 900.0  # the whole timing on a node (torch.compile and TensorRT builds happen inside it)


# The capacity plan's spare capacity above the peak unless the user says (`capacity.headroom`, `--headroom`).
DEFAULT_HEADROOM = 0.2


@dataclass
class CapacityConfig:
    """The report's capacity plan (docs/capacity-plan.md): per tier, the nodes that serve this traffic within
    `experiment.slo.p99_ms` (from the SLO search's highest throughput per node) and what they cost per hour and per
    month at each listed price. Traffic is in images/s: a request of b images counts b."""

    traffic_img_s: float | None = None  # the average traffic, images/s; null: no capacity plan
    peak_img_s: float | None = None  # the peak the nodes are sized for, >= traffic_img_s; null: the average
    headroom: float = DEFAULT_HEADROOM  # spare capacity above the peak, a fraction in [0, 1]: 0.2 sizes for 1.2 x it
    # Generative: the peak requests/s the plan is sized for, in tokens (each request the measured output tokens of
    # the point chosen within experiment.slo.ttft_p99_ms / tpot_p99_ms); null: no plan
    peak_rps: float | None = None


@dataclass
class TierbenchConfig:
    """The whole config: one sweep is one GPU tier x the experiment matrix."""

    gpu: GpuTierConfig = MISSING
    # the model measured: an image model (conf/model/ files on base_model) or a language model (base_language_model)
    model: ServedModel = MISSING
    experiment: ExperimentConfig = MISSING
    cluster: ClusterConfig = MISSING
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    # entry name -> the typed settings of the class that serves it (conf/backends/, BACKEND_SCHEMAS)
    backends: dict[str, Any] = field(default_factory=dict)
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
