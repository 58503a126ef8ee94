"""`python -m runners.doctor [--tier T]`: can this node serve the tier it would declare? One table, read in seconds.

It probes the node as a sweep would (`serving.probe.describe_node`: Python, Ray, GPUs, driver and CUDA through NVML, and
each backend package's own facts: torch and the CUDA it was built for, the ONNX Runtime providers that load in a
session, the Triton that would serve, TorchServe and its Java, ...; the compiled load engine, built here if it is not
yet, and whether it starts), then asks every backend
variant in conf/backends/ whether it runs here, with the backends' own rules (`Backend.unsupported_reason`), for
the tier: `--tier`, else the one the GPU's name matches, else `local`. Exit code 1 when the node cannot serve that
tier (a GPU tier without its GPU, or no variant runs); `runners.node` runs it before `ray start`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runners import SUPPORTED_PYTHON
from serving.workloads.image.formats import InputFormat

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig
    from serving.node import MigState, NodeInfo

# Every backend variant is asked about these; a variant runs when one of them does.
PROBE_PROTOCOLS = ("http", "grpc")
NOT_OK_DOCS = "docs/troubleshooting.md#the-doctor-says-not-ok"
PROBE_INPUT_FORMATS = tuple(InputFormat)


@dataclass
class Verdict:
    variant: str
    runs: bool
    detail: str  # what serves (runs) or why not (skipped)


@dataclass
class Diagnosis:
    tier: str | None
    tier_problem: str | None  # why this node is not a node of the tier (None: it is, or no tier)
    verdicts: list[Verdict]

    @property
    def ok(self) -> bool:
        return self.tier_problem is None and (self.tier is None or any(v.runs for v in self.verdicts))


def default_tier(gpu_names: tuple[str, ...], memory_mib: tuple[int | None, ...] = (),
                 mig: MigState | None = None) -> str:
    """The tier a node's GPU is (conf/gpu/*.yaml; on a card in MIG mode, the slice tier of the MIG slice its
    processes see), or `local` when none (or several) is."""
    from experiments.cluster.tiers import tiers_for_gpu

    matched = tiers_for_gpu(gpu_names, memory_mib, mig=mig)
    return matched[0] if len(matched) == 1 else "local"


def backend_verdicts(cfg: TierbenchConfig, node: NodeInfo, emulated: bool) -> list[Verdict]:
    """Every variant of conf/backends: runs (and on what) or skipped, by the backend's own unsupported_reason."""
    from experiments.run.server_group import build_backend

    verdicts = []
    for variant in cfg.backends:
        try:
            backend = build_backend(cfg, variant, node, {}, emulated)
        except (TypeError, ValueError) as exc:
            verdicts.append(Verdict(variant, False, f"bad settings: {exc}"))
            continue
        reasons = [backend.unsupported_reason(p, f) for p in PROBE_PROTOCOLS for f in PROBE_INPUT_FORMATS]
        runs = any(r is None for r in reasons)
        verdicts.append(Verdict(variant, runs, backend.runs_on() if runs else next(r for r in reasons if r)))
    return verdicts


def diagnose(node: NodeInfo, tier: str | None, emulated: bool = False) -> Diagnosis:
    if tier is None:  # a head or a client pool: nothing to serve
        return Diagnosis(None, None, [])
    from experiments.cluster.tiers import tier_gpu_problem
    from experiments.config.compose import load_config

    cfg = load_config([f"gpu={tier}"])
    problem = None if emulated else tier_gpu_problem(cfg.gpu, node.gpu_names, node.gpu_memory_mib,
                                                        cpu_count=node.cpu_count, mig=node.mig)
    return Diagnosis(tier, problem, backend_verdicts(cfg, node, emulated))


def _python_row(node: Any) -> tuple[str, str, str]:
    supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_PYTHON)
    return ("Python", node.python_version, f"{sys.executable}; tierbench runs on {supported}, the same minor on "
            "every node and the head")


def node_rows(node: Any) -> list[tuple[str, str, str]]:
    """(what, version or state, detail) for the node's stack: what every backend shares, then each backend package's
    own rows (`BackendPackage.doctor_rows`; a row several packages share, torch, once)."""
    from serving.registry import backend_packages

    gpus = ", ".join(node.gpu_names)
    gpu = (gpus, f"driver {node.driver_version}, CUDA {node.cuda_version} (the newest the driver runs)"
           + mig_detail(node)) if node.has_gpu else ("none", node.gpu_problem or "NVML finds no GPU")
    rows = {"Python": _python_row(node), "Ray": ("Ray", node.ray_version, "the same version on every node and the "
                                                 "head"), "GPU": ("GPU", *gpu), "CPU": _cpu_row(node)}
    for package in backend_packages().values():
        for row in package.doctor_rows(node):
            rows.setdefault(row.what, tuple(row))
    return [*rows.values(), engine_row()]


def _cpu_row(node: Any) -> tuple[str, str, str]:
    """How busy the node's CPU is now: a sweep started now would measure its servers beside that work."""
    from serving.node import busy_elsewhere

    busy = node.cpu_busy_cores
    if busy is None:
        return ("CPU", "unknown", "no /proc/stat to read the busy cores from")
    value = f"{busy:.1f} of {node.cpu_count} busy"
    if busy_elsewhere(busy, node.cpu_count):
        return ("CPU", value, "other work is running: a sweep started now measures its servers beside it")
    return ("CPU", value, "idle enough to measure on")


def mig_detail(node: Any) -> str:
    """The GPUs in MIG mode, their slices and the ones this node's processes see (CUDA_VISIBLE_DEVICES); '' where no
    GPU is in MIG mode."""
    from experiments.cluster.tiers import describe_slices

    mig = node.mig
    on = [i for i in range(len(node.gpu_names)) if mig.on(i)]
    if not on:
        return ""
    parts = [f"GPU {i} in MIG mode: {describe_slices(mig.on_gpu(i)) or 'no slices yet'}" for i in on]
    seen = ", ".join(f"{d.uuid} ({d.profile or d.name})" for d in mig.seen) if mig.pinned else ""
    parts.append(f"this node computes on {seen}" if seen else
                 "CUDA_VISIBLE_DEVICES names no slice (start the node with CUDA_VISIBLE_DEVICES=MIG-<uuid>)")
    return "; " + "; ".join(parts)


def engine_row() -> tuple[str, str, str]:
    """The compiled load engine on this machine (the doctor runs where it diagnoses): built, started, what it speaks;
    without it trials are measured by the Python client (experiment.load_engine=auto)."""
    from experiments.measure.engine.build import engine_status

    status = engine_status()
    if not status.available:
        return ("Load engine", "python only", f"the compiled engine cannot run here: {status.problem}")
    speaks = "HTTP/1.1 and gRPC" if status.http2 else "HTTP/1.1 only (gRPC needs libnghttp2.so.14: python measures it)"
    return ("Load engine", "compiled", f"{status.version}, {speaks}; {status.binary}")


def render(node: Any, diagnosis: Diagnosis) -> str:
    lines = [f"tierbench doctor: node {node.hostname} ({node.cpu_model}, {node.cpu_count} CPUs)"]
    lines += [f"  {what:<13} {value:<22} {detail}" for what, value, detail in node_rows(node)]
    if diagnosis.tier is None:
        lines.append("No tier declared (a head or a client pool): nothing to serve here.")
        return "\n".join(lines)
    lines.append(f"Backend variants (conf/backends/) on tier {diagnosis.tier}:")
    width = max(len(v.variant) for v in diagnosis.verdicts)
    first_with: dict[str, str] = {}  # a reason shared by several variants is spelt out once
    for v in diagnosis.verdicts:
        detail = v.detail if v.runs or v.detail not in first_with else f"(as {first_with[v.detail]})"
        first_with.setdefault(v.detail, v.variant)
        lines.append(f"  {v.variant:<{width}}  {'runs' if v.runs else 'skipped':<8} {detail}")
    running = sum(v.runs for v in diagnosis.verdicts)
    if diagnosis.tier_problem:
        lines.append(f"NOT OK: this node cannot serve tier {diagnosis.tier}: {diagnosis.tier_problem}. Declare the "
                     "tier its GPU matches (or none: --client-pool), or use an emulated cluster to try tiers on CPUs "
                     f"({NOT_OK_DOCS}).")
    elif not running:
        lines.append(f"NOT OK: no backend variant runs here on tier {diagnosis.tier} (reasons above; {NOT_OK_DOCS}).")
    else:
        lines.append(f"OK: this node can serve tier {diagnosis.tier} ({running} of {len(diagnosis.verdicts)} "
                     "backend variants run; the others are logged as skipped, with the reason).")
    return "\n".join(lines)


def check(tier: str | None, emulated: bool = False, gpu_tier_default: bool = True) -> tuple[bool, str]:
    """Probe this node and judge it for `tier` (None: the tier its GPU matches, else local, when
    `gpu_tier_default`; no tier at all otherwise). Returns (ok, the table)."""
    from serving.probe import describe_node

    node = describe_node()
    if tier is None and gpu_tier_default:
        tier = default_tier(node.gpu_names, node.gpu_memory_mib, node.mig)
    diagnosis = diagnose(node, tier, emulated)
    return diagnosis.ok, render(node, diagnosis)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", help="judge the node for this tier (default: the tier its GPU matches, else local)")
    parser.add_argument("--emulated", action="store_true",
                        help="a node of an emulated cluster: a GPU tier on a machine without that GPU is allowed")
    args = parser.parse_args(argv)
    if args.tier:
        from experiments.cluster.tiers import known_tiers

        if args.tier not in known_tiers():
            print(f"error: --tier {args.tier}: unknown tier; choose from {sorted(known_tiers())} (conf/gpu/*.yaml)",
                  file=sys.stderr)
            return 2
    ok, table = check(args.tier, args.emulated)
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
