"""What a node really has: GPUs, driver and CUDA (NVML), Python and Ray, and what each backend package needs to know
of it (its own facts: torch and the CUDA it was built for, the ONNX Runtime providers that load in a session, which
Triton can serve, TorchServe's Java, ...), probed by the package's own code (`serving.registry`).

`serving.probe.describe_node()` runs on the node itself (inside a Ray task placed there, or `python -m
runners.doctor`); the result travels back to the driver. Backends decide what they can run from it
(`Backend.unsupported_reason`).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

F = TypeVar("F")


# What CUDA_VISIBLE_DEVICES names a MIG device by: its UUID, as `nvidia-smi -L` lists it (`MIG-<uuid>`).
MIG_UUID_PREFIX = "MIG-"


@dataclass(frozen=True)
class MigDevice:
    """A MIG device: one slice of a GPU in MIG mode, as NVML names it (its card's name and ` MIG <profile>`, e.g.
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb"), with the slice's own memory."""

    gpu: int  # the index of its GPU (NVML's, as nvidia-smi -i takes it)
    name: str
    memory_mib: int | None = None  # the slice's total memory (NVML); None where not known
    uuid: str = ""  # `MIG-<uuid>`: what CUDA_VISIBLE_DEVICES names it by

    @property
    def profile(self) -> str:
        """The slice's profile, e.g. `1g.10gb` (the name's part after ` MIG `; '' where the name has none)."""
        head, sep, tail = self.name.rpartition(" MIG ")
        return tail.strip() if sep and head else ""


@dataclass(frozen=True)
class MigState:
    """MIG on a node: which GPUs are in MIG mode, the MIG devices on them, and which of those this node's processes
    compute on (CUDA_VISIBLE_DEVICES naming MIG devices by UUID pins a process to them)."""

    enabled: tuple[bool, ...] = ()  # per GPU, in NVML's order: MIG mode on (False where off or not supported)
    devices: tuple[MigDevice, ...] = ()
    visible: tuple[str, ...] | None = None  # CUDA_VISIBLE_DEVICES as a list; None where it is not set

    def on(self, gpu: int) -> bool:
        return gpu < len(self.enabled) and self.enabled[gpu]

    @property
    def pins_slices(self) -> bool:
        """Whether CUDA_VISIBLE_DEVICES names MIG devices: then this node's processes see those slices only."""
        return any(v.strip().startswith(MIG_UUID_PREFIX) for v in self.visible or ())

    @property
    def seen(self) -> tuple[MigDevice, ...]:
        """The MIG devices this node's processes may compute on: those CUDA_VISIBLE_DEVICES names, else all."""
        if not self.pins_slices:
            return self.devices
        wanted = [v.strip() for v in self.visible or () if v.strip().startswith(MIG_UUID_PREFIX)]
        # CUDA takes a UUID's first characters too
        return tuple(d for d in self.devices if d.uuid and any(d.uuid.startswith(w) for w in wanted))

    @property
    def pinned(self) -> bool:
        """Whether the slice this node computes on is known: CUDA_VISIBLE_DEVICES names MIG devices, or the node
        has one MIG device only."""
        return self.pins_slices or len(self.devices) == 1

    def on_gpu(self, gpu: int) -> tuple[MigDevice, ...]:
        return tuple(d for d in self.devices if d.gpu == gpu)


def visible_devices() -> tuple[str, ...] | None:
    """CUDA_VISIBLE_DEVICES of this process as a list (None: not set)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def gpu_id(value: Any) -> int | str:
    """One GPU id Ray gave an actor: an index, or a MIG device's UUID (`MIG-<uuid>`) on a node started with
    CUDA_VISIBLE_DEVICES naming MIG slices (Ray hands back what that variable named)."""
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def gpu_ids(ids: Any) -> list[int | str]:
    """The GPUs Ray gave an actor (`get_accelerator_ids()["GPU"]`): indices, or MIG devices' UUIDs."""
    return [gpu_id(i) for i in ids or ()]


@dataclass(frozen=True)
class GpuInventory:
    """The NVIDIA GPUs NVML sees, with the driver and the newest CUDA it supports; `problem` says why none."""

    names: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    problem: str | None = None
    # each GPU's total memory, as NVML reports it (the tier's identity checks it); None where NVML does not say
    memory_mib: tuple[int | None, ...] = ()
    mig_enabled: tuple[bool, ...] = ()  # per GPU: MIG mode on (False where off or not supported)
    mig_devices: tuple[MigDevice, ...] = ()  # the MIG devices of the GPUs in MIG mode
    visible_devices: tuple[str, ...] | None = None  # CUDA_VISIBLE_DEVICES of the process that asked (None: not set)

    @property
    def mig(self) -> MigState:
        return MigState(self.mig_enabled, self.mig_devices, self.visible_devices)

    @property
    def device_names(self) -> tuple[str, ...]:
        """The names of what this node computes on: the MIG slices it is pinned to (`MigState.pinned`), else the
        GPUs."""
        return compute_device_names(self.names, self.mig)


def compute_device_names(names: tuple[str, ...], mig: MigState) -> tuple[str, ...]:
    """The GPUs' names, or the MIG slices' where the node is pinned to slices (CUDA_VISIBLE_DEVICES, or one only)."""
    if mig.devices and mig.pinned and mig.seen:
        return tuple(d.name for d in mig.seen)
    return names


@dataclass(frozen=True)
class NodeInfo:
    """What every backend sees of a node (hardware, Python, Ray), and the facts each backend package probed there for
    itself (`facts`: ONNX Runtime's providers for Triton, torch's CUDA for the PyTorch servers, ...)."""

    hostname: str
    ip: str
    ray_node_id: str
    cpu_model: str
    cpu_count: int
    gpu_names: tuple[str, ...] = ()
    gpu_memory_mib: tuple[int | None, ...] = ()  # each GPU's total memory (NVML); () or None where not known
    gpu_mig_enabled: tuple[bool, ...] = ()  # per GPU: MIG mode on; () where not known
    mig_devices: tuple[MigDevice, ...] = ()  # the MIG devices (slices) of its GPUs in MIG mode
    visible_devices: tuple[str, ...] | None = None  # CUDA_VISIBLE_DEVICES on the node (None: not set)
    driver_version: str | None = None
    cuda_version: str | None = None  # the newest CUDA the driver supports (NVML)
    gpu_problem: str | None = None  # why NVML found no GPU
    ray_gpus: float = 0.0  # GPUs Ray schedules on this node (fractional `num_gpus` asks need them)
    python_version: str = ""
    ray_version: str = ""
    cpu_busy_cores: float | None = None  # cores busy over half a second as the node was described (None: unknown)
    # The backends' facts by their KEY (`serving.registry.node_fact_kinds`): read them with `facts(kind)`.
    stack: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_names)

    @property
    def mig(self) -> MigState:
        return MigState(self.gpu_mig_enabled, self.mig_devices, self.visible_devices)

    @property
    def gpu_name(self) -> str:
        """The GPU's name (the MIG slice's, where the node is pinned to one), or the CPU model when the node has no
        GPU."""
        names = compute_device_names(self.gpu_names, self.mig)
        return names[0] if names else f"CPU: {self.cpu_model}"

    def facts(self, kind: type[F]) -> F:
        """The facts of `kind` (e.g. `serving.pytorch.facts.TorchFacts`) probed on this node; `kind()`, its "not
        probed" defaults, when they were not."""
        found = self.stack.get(kind.KEY)  # type: ignore[attr-defined]
        return found if isinstance(found, kind) else kind()

    def with_facts(self, *facts: Any) -> NodeInfo:
        """This node with `facts` in place of those of their kinds."""
        return replace(self, stack={**self.stack, **{type(f).KEY: f for f in facts}})


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_times() -> tuple[float, float] | None:
    """(busy, total) CPU time of the whole machine since boot, in clock ticks, from Linux's /proc/stat (idle and
    iowait count as not busy); None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            values = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(values) < 4:
        return None
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    return total - idle, total


# A node is busy with other work when, before a sweep has started anything on it, at least this many of its cores
# and this share of them were busy (Ray's own daemons take 0.02-0.1 of a core): whatever runs there shares the CPU
# with the servers and clients about to be measured.
BUSY_ELSEWHERE_CORES = 0.5
BUSY_ELSEWHERE_SHARE = 0.25


def busy_cores(seconds: float = 0.5) -> float | None:
    """How many of the machine's cores were busy over the next `seconds` (this process sleeps meanwhile); None where
    there is no /proc/stat."""
    before = cpu_times()
    time.sleep(seconds)
    after = cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def busy_elsewhere(cores_busy: float | None, cpu_count: int) -> bool:
    """Whether a node measured this busy, with nothing of the sweep's on it yet, has other work running."""
    return cores_busy is not None and cores_busy >= max(BUSY_ELSEWHERE_CORES, BUSY_ELSEWHERE_SHARE * cpu_count)


def _stat_fields(path: str) -> list[str] | None:
    """A /proc .../stat line's fields after the command name (which may hold spaces): state, ppid, ... (None: gone)."""
    try:
        with open(path) as f:
            line = f.read()
    except OSError:
        return None
    return line[line.rfind(")") + 2:].split()


def process_tree(roots: set[int]) -> set[int]:
    """`roots` and every process descending from them (Linux /proc): a server and the workers it started."""
    children: dict[int, list[int]] = {}
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return set()
    for pid in entries:
        fields = _stat_fields(f"/proc/{pid}/stat")
        if fields:
            children.setdefault(int(fields[1]), []).append(pid)
    found, todo = set(), [r for r in roots if os.path.isdir(f"/proc/{r}")]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def thread_cpu_ticks(pids: set[int]) -> dict[tuple[int, int], int]:
    """User + system CPU time of every thread of `pids`, in clock ticks, by (pid, thread id)."""
    out: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
            if fields and len(fields) > 12:
                out[(pid, int(tid))] = int(fields[11]) + int(fields[12])  # utime, stime
    return out


def thread_name(pid: int, tid: int) -> str:
    """Which thread `(pid, tid)` is, for a person: its name, its process's program and the ids, e.g. `thread
    'triton_python_b' of triton_python_backend_stub (pid 412, tid 418)`; what /proc no longer has is left out."""
    def read(path: str) -> str:
        try:
            with open(path, "rb") as file:
                return file.read().decode(errors="replace").strip()
        except OSError:
            return ""

    program = os.path.basename(read(f"/proc/{pid}/cmdline").split("\0", 1)[0]) or read(f"/proc/{pid}/comm")
    thread = read(f"/proc/{pid}/task/{tid}/comm")
    return (f"thread {thread!r} of " if thread else "a thread of ") + f"{program or 'a process'} (pid {pid}, tid {tid})"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_gpus() -> GpuInventory:
    """GPU names, memory, driver version and the driver's CUDA version from NVML (nvidia-ml-py, module pynvml); per
    GPU whether MIG mode is on, and the MIG devices (slices) of those where it is."""
    try:
        import pynvml
    except ImportError:
        return GpuInventory(problem="nvidia-ml-py (module pynvml) is not installed",
                            visible_devices=visible_devices())
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuInventory(problem=f"NVML: {exc} (no NVIDIA driver here)", visible_devices=visible_devices())
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = tuple(_text(pynvml.nvmlDeviceGetName(handle)) for handle in handles)
        memory = tuple(_memory_mib(pynvml, handle) for handle in handles)
        enabled = tuple(_mig_mode_on(pynvml, handle) for handle in handles)
        devices = tuple(d for i, handle in enumerate(handles) if enabled[i] for d in _mig_devices(pynvml, i, handle))
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12060
        return GpuInventory(names, driver, f"{cuda // 1000}.{cuda % 1000 // 10}",
                            None if names else "NVML finds no GPU", memory, enabled, devices, visible_devices())
    except pynvml.NVMLError as exc:
        return GpuInventory(problem=f"NVML: {exc}", visible_devices=visible_devices())
    finally:
        pynvml.nvmlShutdown()


def _memory_mib(pynvml: Any, handle: Any) -> int | None:
    """A device's total memory in MiB; None where NVML does not say (a GPU in MIG mode seen from a container given
    one of its slices reports none of its own)."""
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20
    except pynvml.NVMLError:
        return None


def _mig_mode_on(pynvml: Any, handle: Any) -> bool:
    """Whether the GPU's current MIG mode is on; False where NVML says MIG is not supported (a card without MIG)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # NVMLError_NotSupported on cards without MIG, or a driver without the call
        return False
    return current == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _mig_devices(pynvml: Any, gpu: int, handle: Any) -> list[MigDevice]:
    """The MIG devices of one GPU in MIG mode: NVML's indices up to its maximum count, the empty ones skipped."""
    out: list[MigDevice] = []
    try:
        count = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except pynvml.NVMLError:
        return out
    for index in range(count):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError:  # NVMLError_NotFound: no MIG device at this index (or not this container's)
            continue
        memory = _memory_mib(pynvml, mig)
        try:
            uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        except pynvml.NVMLError:
            uuid = ""
        out.append(MigDevice(gpu, _text(pynvml.nvmlDeviceGetName(mig)), memory, uuid))
    return out


def ray_node_gpus(node_id: str) -> float:
    """The `GPU` resource Ray gives this node (0 outside Ray or where Ray detected none)."""
    try:
        import ray

        if not node_id or not ray.is_initialized():
            return 0.0
        return float(next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id), 0.0))
    except Exception:  # noqa: BLE001 - a fact for scheduling, not worth failing a sweep over
        return 0.0


def current_location() -> dict[str, str]:
    """The Ray node and host the calling process runs on: what every actor's `where` reports (outside Ray, e.g. a
    test hosting a server itself, no node id: asking Ray would start one)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    return {"node_id": node_id, "hostname": socket.gethostname()}
