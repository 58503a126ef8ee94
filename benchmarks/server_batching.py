"""Does server-side batching change throughput? Batching on vs off, on both servers, at concurrency >= 8.

Per server, batching off and on: Ray Serve's pytorch vs pytorch_batched (`@serve.batch`, 2 ms wait, matched to
Triton's), pytorch_batched_20ms (a wait long enough for batches to fill while a CPU forward pass runs) and
pytorch_batched_when_free (2 ms, but each pass takes what queued during the last, as Triton's batcher does),
Triton's triton_onnx vs triton_onnx_dynbatch (dynamic batcher, 2 ms queue delay). A server's variants are started
side by side on this machine (`gpu=local`) and measured with the sweep's own machinery (client actors, warm-up,
common window) on one protocol, tensor input, batch size 1 unless told (many small requests, where a server-side
batcher can help). Windows alternate between the variants (forward, then reverse order) for several rounds, so load
that other processes put on the machine hits all alike; the table gives each round's on/off throughput ratio, their
median, and the images per forward pass each server reported (`server_batch_avg`). Writes JSON.

    python -m benchmarks.server_batching [--protocol grpc] [--concurrency 8 16] [--rounds 3] [--window 3]
        [--servers triton] [--variant NAME=BASE:key=value;key=value ...]
        [--out FILE] [hydra overrides, e.g. gpu=h100 backends.triton_onnx_dynbatch.max_queue_delay_us=500]

`--variant` adds a batching variant to its server's group: a copy of BASE with some settings changed, e.g.
`--variant dyn_heuristic=triton_onnx_dynbatch:cuda_options={cudnn_conv_algo_search:HEURISTIC}` or
`--variant two_instances=triton_onnx:instance_count=2`. Every row also carries what says why a point is slow: the
server's queue and compute time, the GPU's busy share, the server's busiest thread (name and CPU) and the verdict.

Numbers on a shared 2-core machine are noisy: compare ratios measured in one run, not across runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.config.compose import compose
from serving.paths import REPO_ROOT

# Per server: the variant without batching first, then the variants with it.
GROUPS = {"ray_serve": ("pytorch", "pytorch_batched", "pytorch_batched_20ms", "pytorch_batched_when_free"),
          "triton": ("triton_onnx", "triton_onnx_dynbatch")}
# What each row carries to say why a point is slow (experiments/measure/catalog.py)
WHY = ("server_queue_ms", "server_compute_infer_ms", "server_request_ms", "gpu_util_pct", "server_cpu_cores",
       "server_thread_cpu_max", "server_backend_input_ms", "server_backend_run_ms", "server_backend_stub_ms")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="grpc", choices=["http", "grpc"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1], help="images per request (one or more)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating off/on window pairs per point")
    parser.add_argument("--window", type=float, default=3.0, help="measurement window, seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window, seconds")
    parser.add_argument("--servers", nargs="+", choices=sorted(GROUPS), default=sorted(GROUPS),
                        help="which servers' groups to measure (default: all)")
    parser.add_argument("--variant", action="append", default=[], type=parse_variant, metavar="NAME=BASE:SETTINGS",
                        help="another variant of BASE's server, settings as key=value;key=value (Hydra values)")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default runs/benchmarks/...)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    return parser.parse_args()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def parse_variant(text: str) -> tuple[str, str, list[str]]:
    """`NAME=BASE:key=value;key=value` -> (NAME, BASE, its settings as Hydra overrides `key=value`)."""
    name, _, rest = text.partition("=")
    base, _, settings = rest.partition(":")
    if not name or not base:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: write NAME=BASE:key=value;key=value")
    return name, base, [item for item in settings.split(";") if item]


def groups_of(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """The measured servers' groups, each with the --variant copies of its variants appended."""
    groups = {server: GROUPS[server] for server in args.servers}
    for name, base, _ in args.variant:
        server = next((s for s, group in GROUPS.items() if base in group), None)
        if server is None:
            raise SystemExit(f"--variant {name}: base {base!r} is none of {[v for g in GROUPS.values() for v in g]}")
        if server not in groups:
            raise SystemExit(f"--variant {name}: its server {server} is not in --servers {args.servers}")
        groups[server] += (name,)
    return groups


def add_variants(tree: Any, variants: list[tuple[str, str, list[str]]]) -> None:
    """Each --variant as a copy of its base's settings, then its own settings (values in Hydra's override syntax,
    checked against the typed settings like any other)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    parser = OverridesParser.create()
    with open_dict(tree):
        for name, base, settings in variants:
            tree.backends[name] = OmegaConf.merge(tree.backends[base])
            for override in parser.parse_overrides(settings):
                OmegaConf.update(tree.backends[name], override.key_or_group, override.value(), merge=False)


def share_the_gpu(tree: Any, servers: int) -> None:
    """A group's servers run side by side: on a node where Ray schedules GPUs each asks for at most 1/servers of
    one, so all of them fit on a single GPU (Ray would leave the rest pending)."""
    share = math.floor(1000 / servers) / 1000  # rounded down: six shares of 0.167 would ask for 1.002 GPUs
    for settings in tree.backends.values():
        for key in ("num_gpus", "replica_num_gpus"):
            if key in settings and settings[key] > share:
                settings[key] = share


def compose_config(args: argparse.Namespace) -> Any:
    from experiments.config.typed import typed
    from experiments.config.validation import validate

    groups = groups_of(args)
    variants = [v for group in groups.values() for v in group]
    overrides = [
        f"experiment.backends=[{','.join(variants)}]", f"experiment.protocols=[{args.protocol}]",
        "experiment.input_formats=[tensor]", f"experiment.batch_sizes=[{','.join(map(str, args.batch_size))}]",
        f"experiment.concurrency=[{','.join(map(str, args.concurrency))}]", f"experiment.window_s={args.window}",
        f"experiment.warmup_s={args.warmup}", "experiment.warmup_requests=10",
        # One window per measurement: the rounds alternate the two servers instead of repeating windows.
        "experiment.stability.windows=1", "experiment.stability.max_windows=1", *args.overrides,
    ]
    tree = compose(overrides)
    add_variants(tree, args.variant)
    share_the_gpu(tree, max(len(group) for group in groups.values()))
    cfg = typed(tree)
    validate(cfg)
    return cfg


def measure_group(cfg: Any, args: argparse.Namespace, group: tuple[str, ...], node: Any, options: dict[str, Any],
                  clients: Any) -> list[dict[str, Any]]:
    """Start every server of `group` (each with its node's CPU/GPU sampler), then alternate their windows; one row
    per window."""
    from experiments.measure.efficiency import verdict
    from experiments.measure.telemetry import start_node_telemetry
    from experiments.plan import planned_trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    backends = {name: build_backend(cfg, name, node, options) for name in group}
    telemetry: dict[str, Any] = {}
    rows = []
    try:
        handles = {name: backend.start() for name, backend in backends.items()}
        for name, handle in handles.items():
            telemetry[name] = start_node_telemetry(cfg.telemetry, handle, node, options)
        for batch, conc in itertools.product(args.batch_size, args.concurrency):
            for round_index in range(args.rounds):
                order = group if round_index % 2 == 0 else group[::-1]
                for name in order:
                    trial = planned_trial(cfg, name, args.protocol, "tensor", batch, conc)
                    record = run_trial(cfg, trial, backends[name], handles[name], node, clients, telemetry[name])
                    if record.status != "ok":
                        raise SystemExit(f"{trial.name}: {record.reason}")
                    m = record.metrics
                    judged = verdict(m, record.params, node.has_gpu, float(cfg.experiment.client_cpu_limit),
                                     node.cpu_count)
                    rows.append({"variant": name, "server_batching": handles[name].params["server_batching"],
                                 "server_batch_wait_ms": handles[name].params["server_batch_wait_ms"],
                                 "batch_size": batch, "concurrency": conc, "round": round_index,
                                 "throughput_img_s": m["throughput_img_s"],
                                 "latency_p50_ms": m["latency_p50_ms"], "latency_p99_ms": m["latency_p99_ms"],
                                 "server_batch_avg": m.get("server_batch_avg"), "load_average": os.getloadavg()[0],
                                 **{key: m.get(key) for key in WHY}, "bottleneck": str(judged.bottleneck),
                                 "evidence": judged.evidence,
                                 "busiest_thread": record.params.get("server_busiest_thread")})
                    print(f"  {name:<22} b{batch:<3} c{conc:<3} round {round_index}: "
                          f"{m['throughput_img_s']:7.1f} img/s  p50 {m['latency_p50_ms']:7.1f} ms  "
                          f"images/pass {_figure(m, 'server_batch_avg', '5.2f')}  "
                          f"queue {_figure(m, 'server_queue_ms', '.1f')} ms  "
                          f"infer {_figure(m, 'server_compute_infer_ms', '.1f')} ms{_inside(m)}  "
                          f"GPU busy {_pct(m.get('gpu_util_pct'))}  server CPU {_figure(m, 'server_cpu_cores', '.2f')}"
                          f" cores, busiest thread {_figure(m, 'server_thread_cpu_max', '.2f')} "
                          f"({record.params.get('server_busiest_thread')})  verdict {judged.bottleneck}: "
                          f"{judged.evidence}", flush=True)
    finally:
        for sampler in telemetry.values():
            if sampler is not None:
                sampler.stop()
        for backend in backends.values():
            backend.stop()
    return rows


def _figure(m: dict[str, float], key: str, spec: str) -> str:
    """A metric as `spec` formats it; '-' where the server did not report it (Serve has no infer time of Triton's)."""
    value = m.get(key)
    return "-" if value is None or value != value else format(value, spec)


def _inside(m: dict[str, float]) -> str:
    """Where the bundled Triton's Python model spent its infer time, when it says."""
    if "server_backend_run_ms" not in m:
        return ""
    return (f" (gather {m['server_backend_input_ms']:.2f}, run {m['server_backend_run_ms']:.1f}, "
            f"stub {m['server_backend_stub_ms']:.2f})")


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    ratios = []
    for server, (off, *ons) in groups_of(args).items():
        for on in ons:
            for batch, conc in itertools.product(args.batch_size, args.concurrency):
                per_round, batches = [], []
                for r in range(args.rounds):
                    pick = {row["variant"]: row for row in rows if row["batch_size"] == batch
                            and row["concurrency"] == conc and row["round"] == r and row["variant"] in (off, on)}
                    if off in pick and on in pick and pick[off]["throughput_img_s"]:
                        per_round.append(pick[on]["throughput_img_s"] / pick[off]["throughput_img_s"])
                        if pick[on]["server_batch_avg"] is not None:
                            batches.append(pick[on]["server_batch_avg"])
                if per_round:
                    ratios.append({"server": server, "variant": on, "batch_size": batch, "concurrency": conc,
                                   "on_over_off_per_round": per_round,
                                   "on_over_off_median": statistics.median(per_round),
                                   "images_per_pass_median": statistics.median(batches) if batches else None})
    return ratios


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from experiments.cluster.connection import ray_cluster
    from experiments.cluster.tiers import placement_options
    from experiments.measure.client_actor import ClientPool
    from serving.probe import describe_node

    cfg = compose_config(args)
    started, load_before = time.time(), os.getloadavg()
    rows: list[dict[str, Any]] = []
    with ray_cluster(cfg.cluster, cfg.gpu.name):
        options = placement_options(cfg.gpu.name)
        node = ray.get(ray.remote(describe_node).options(num_cpus=0, **options).remote(), timeout=120)
        clients = ClientPool(cfg.experiment, options, cfg.serving.start_timeout_s).start()
        try:
            for server, group in groups_of(args).items():
                print(f"{server}: {group[0]} (off) vs {', '.join(group[1:])} (on)", flush=True)
                rows += measure_group(cfg, args, group, node, options, clients)
        finally:
            clients.close()
    return {"protocol": args.protocol, "batch_size": args.batch_size, "tier": cfg.gpu.name,
            "variants": {name: f"{base}: {'; '.join(settings)}" for name, base, settings in args.variant},
            "window_s": args.window,
            "warmup_s": args.warmup, "rounds": args.rounds, "seconds": time.time() - started,
            "node": node.gpu_name, "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "rows": rows, "ratios": summarise(rows, args)}


def print_table(result: dict[str, Any]) -> None:
    print(f"\nserver-side batching on vs off: {result['protocol']}, tensor input, batch {result['batch_size']}, "
          f"{result['rounds']} alternating rounds of {result['window_s']} s windows on {result['node']} "
          f"(load average before/after {result['load_average_before'][0]:.1f} / "
          f"{result['load_average_after'][0]:.1f})")
    print(f"{'server':<12}{'batching variant':<24}{'batch':>6}{'conc':>6}{'images/pass':>13}{'median on/off':>15}"
          "   per round")
    for ratio in result["ratios"]:
        rounds = "  ".join(f"{r:.2f}x" for r in ratio["on_over_off_per_round"])
        per_pass = ratio["images_per_pass_median"]
        print(f"{ratio['server']:<12}{ratio['variant']:<24}{ratio['batch_size']:>6}{ratio['concurrency']:>6}"
              f"{'-' if per_pass is None else f'{per_pass:.2f}':>13}{ratio['on_over_off_median']:>14.2f}x   {rounds}")


def main() -> None:
    args = parse_args()
    result = run(args)
    print_table(result)
    out = args.out or REPO_ROOT / "runs" / "benchmarks" / time.strftime("server_batching-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
