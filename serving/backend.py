"""The serving side of a trial: a backend starts its server(s) on a tier's node and says how to reach them.

Implementations live in their packages (`serving/<backend>/`, registered in `serving/registry.py`), each named by the
`_target_` of its typed settings (the entries of `conf/backends/`) and built with them; nothing switches on backend
names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from serving.clients.base import ClientSpec
from serving.model_config import ModelConfig, ServedModel
from serving.models import output_dims, preprocessing
from serving.node import NodeInfo
from serving.runtime import Runtime
from serving.settings import BackendSettings
from serving.workloads.generative.prompts import PromptSource
from serving.workloads.image.corpus import InputSource
from serving.workloads.image.formats import InputFormat


@dataclass
class ServerHandle:
    """A running server group: how it serves and what trial params it contributes."""

    server_mode: str  # e.g. triton_native, triton_python_backend, ray_serve
    urls: dict[str, str]  # protocol -> URL the clients use
    params: dict[str, Any] = field(default_factory=dict)  # e.g. execution_provider, device
    startup_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)  # measured at start, e.g. trt_engine_build_s
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. the rendered config.pbtxt
    node_id: str | None = None  # Ray node the server runs on: GPU telemetry samples there
    # GPUs Ray gave the server: indices, or MIG slices' UUIDs (`MIG-...`); empty: it may use every GPU of its node
    gpu_ids: tuple[int | str, ...] = ()
    # What the server itself reports it computes on: True on the GPU, False on the CPU, None when it cannot say.
    on_gpu: bool | None = None
    # The server's own processes on its node (with every process they start): telemetry samples their threads.
    processes: tuple[int, ...] = ()
    # A server outside the cluster (an endpoint tierbench did not start): no node of ours to sample.
    remote: bool = False


@dataclass
class BackendContext:
    """What every backend needs from the sweep: where to run and what to serve."""

    name: str  # the backend's name in experiment.backends, e.g. triton_onnx
    model: ServedModel  # what to serve: an image model (ModelConfig), or a language model an endpoint serves
    node: NodeInfo  # the tier node the server runs on
    ray_options: dict[str, Any]  # Ray placement for actors on that node (tier resource / label selector)
    host: str = "127.0.0.1"
    start_timeout_s: float = 180.0
    stop_timeout_s: float = 20.0
    request_timeout_s: float = 60.0
    # The experiment's batch sizes: servers warm up (build engines, compile) for each before measurement.
    warmup_batch_sizes: tuple[int, ...] = ()
    input_formats: tuple[str, ...] = tuple(InputFormat)  # what the group's trials send (e.g. skip a JPEG path)
    tier: str = ""  # the GPU tier the sweep measures (names per-tier resources such as Serve apps)
    # The tier promises a GPU (`gpu.requires_gpu`, outside an emulated cluster): a server that would compute on the
    # CPU is skipped or failed instead of falling back, so no CPU figure is filed under a GPU tier's name.
    requires_gpu: bool = False
    # what the clients' requests carry: images (serving.workloads.image.corpus), or conversations (a generative
    # PromptSource)
    inputs: InputSource | PromptSource = field(default_factory=InputSource)
    # Which of the servers sharing one card this is (a shared card's tier runs several copies at once): 0 the first
    tenant: int = 0

    @property
    def server_name(self) -> str:
        """The name that tells this server from its copies on a shared card (Serve apps and routes are cluster-wide)."""
        return f"{self.name}-tenant{self.tenant}" if self.tenant else self.name

    @property
    def client_host(self) -> str:
        """The address clients connect to: the bind address, or the node's own when binding every interface."""
        return self.node.ip if self.host in ("0.0.0.0", "::", "") else self.host


def formable_batches(request_sizes: tuple[int, ...], max_batch: int) -> tuple[int, ...]:
    """Every forward-pass size a server that merges requests can form from requests of `request_sizes` images, up to
    `max_batch`: a GPU server warms each of them up, or the first pass of each new size (cuDNN's algorithm search,
    a larger memory arena) lands inside a measurement window."""
    sizes = [b for b in set(request_sizes) if b > 0]
    reachable = {0}
    for total in range(1, max_batch + 1):
        if any(total - b in reachable for b in sizes if b <= total):
            reachable.add(total)
    return tuple(sorted(reachable - {0}))


class Backend(ABC):
    """One backend on one tier node: start once, serve every trial of the group, stop (always)."""

    def __init__(self, context: BackendContext, settings: BackendSettings) -> None:
        """`settings` were checked before anything started (`BackendSettings.check`)."""
        self.context = context
        self.settings = settings
        # A first TensorRT engine build or torch.compile happens before "ready" and can take minutes.
        self.start_timeout_s = settings.start_timeout_s or context.start_timeout_s

    @property
    def max_request_batch(self) -> int:
        """The most images one request may carry (the cross-check's batch stays within it)."""
        return int(self.context.model.max_batch_size)

    @property
    def numerics(self) -> str:
        """The arithmetic the server computes in, which sets the cross-check tolerance: fp32 | fp16 | bf16 | int8."""
        return "fp32"

    @abstractmethod
    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        """Why this backend cannot run (protocol, input_format) on this node; None when it can."""

    def runs_on(self) -> str:
        """What would serve on this node, in a few words (runners.doctor shows it): server and device."""
        return ""

    def runtime(self) -> Runtime | None:
        """What computes the model inside this server on this node (runtime, device, precision): the GPU's own
        ceiling is timed for it in-process (`experiments.measure.ceiling`). None: no in-process equivalent."""
        return None

    def gpu_tier_reason(self) -> str | None:
        """Why a server on this node could not keep a GPU tier's promise (no GPU at all); None when it can or the
        tier needs no GPU. Backends add what else they need (torch's CUDA, ONNX Runtime's GPU providers)."""
        ctx = self.context
        if ctx.requires_gpu and not ctx.node.has_gpu:
            return (f"tier {ctx.tier} is a GPU tier and node {ctx.node.hostname} has no NVIDIA GPU "
                    f"({ctx.node.gpu_problem or ctx.node.gpu_name}): a CPU figure is never filed under a GPU tier")
        return None

    def gpu_mismatch(self, handle: ServerHandle) -> str | None:
        """Why a started server breaks a GPU tier's promise: it reports computing on the CPU. None when it does not."""
        ctx = self.context
        if ctx.requires_gpu and handle.on_gpu is False:
            return (f"{ctx.name} started on node {ctx.node.hostname} but reports running on the CPU "
                    f"({handle.params.get('device') or handle.params.get('execution_provider')}), and tier "
                    f"{ctx.tier} is a GPU tier: a CPU figure is never filed under a GPU tier")
        return None

    @abstractmethod
    def start(self) -> ServerHandle:
        """Start the server(s) and wait until the model answers; raise with the server log on failure."""

    def adopt(self, running: Backend) -> ServerHandle | None:
        """Take over `running`'s server and serve these settings with it, when the server can change in place what
        differs (`BackendSettings.reloadable`): a settings search's next candidate then costs a model reload, not a
        server start. None when it cannot; `running` is then untouched (its owner stops it, this one starts anew).
        Once it has taken the server, a failure raises and `stop` stops it."""
        return None

    @abstractmethod
    def stop(self) -> dict[str, str]:
        """Stop everything started (idempotent); returns server logs by file name."""

    def abort_cause(self, server_logs: dict[str, str]) -> str | None:
        """Why the server aborted, read from its logs (`stop`'s), to add to a failed trial's reason; None when they
        show no abort or the backend does not know its server's way of dying."""
        return None

    def broke_under(self, first_errors: str) -> bool:
        """Whether a trial's errors (its param `first_errors`: the first message of each class) say a part of the
        server broke under it, rather than that it answered the load with errors (shedding, timeouts). Such a trial,
        over its error budget, is measured again on a fresh server, as one whose server stopped answering is."""
        return False

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        """Cumulative server-side counters now (e.g. Triton's metrics endpoint); None when there are none."""
        return None

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """Per-request server-side metrics between two `server_counters` snapshots."""
        return {}

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        """Images the server itself counts as served between two `server_counters` snapshots (the check on
        the clients' throughput); None when it keeps no such count."""
        return None

    @abstractmethod
    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        """How a client actor reaches this server for one trial."""

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """What deploys these settings outside tierbench, by relative path (a settings search exports its winner's):
        built from the configs the started server `rendered` (`ServerHandle.artifacts`) or the settings alone."""
        return {}

    def _spec(self, target: str, url: str, model_name: str, input_format: str, batch_size: int,
              kind: type[ClientSpec] = ClientSpec) -> ClientSpec:
        """A `kind` of spec (a backend's own subclass adds its transport's fields) for the model's shapes (a language
        model's requests carry conversations: no shapes)."""
        model = self.context.model
        if not isinstance(model, ModelConfig):
            return kind(target=target, url=url, model_name=model_name, input_format=input_format,
                        batch_size=batch_size, input_shape=(), output_shape=(),
                        timeout_s=self.context.request_timeout_s, inputs=self.context.inputs)
        return kind(
            target=target,
            url=url,
            model_name=model_name,
            input_format=input_format,
            batch_size=batch_size,
            input_shape=tuple(model.input_shape),
            output_shape=output_dims(model),
            timeout_s=self.context.request_timeout_s,
            inputs=self.context.inputs,
            preprocessing=preprocessing(model).to_json() if len(model.input_shape) == 3 else "",
        )
