"""Client overhead: the project's load generator (client actors, measured exactly as a sweep measures a trial)
against compiled load tools on the same server, on loopback, batch 1, the tiny model (~0.05 ms of compute: the
client and the transport are everything). Goal on every row: throughput ratio >= 0.95, p50 ratio <= 1.1.

    python benchmarks/client_overhead.py [--model tiny] [--runs 3] [--sections triton serve open ceiling]

- triton: Triton (ONNX), HTTP and gRPC, concurrency 1/4/8/16, vs perf_analyzer (C++, from the tritonclient
  wheel; the libraries it needs, libb64 and libcudart, are linked from nvidia-pytriton's).
- serve: Ray Serve `pytorch_direct` and `pytorch`, HTTP, vs wrk (C, Debian's package) at the same concurrency.
  Serve's gRPC has no compiled tool here (no ghz package), so it has no row.
- open: Triton, Poisson arrivals at fractions of the highest rate perf_analyzer measured: late requests (goal
  <= 1 %) and the rate achieved (requests sent) over the rate offered (the arrivals the seeded Poisson schedule
  put in the windows; goal >= 0.98). Achieved over the configured target is shown too: over a few thousand
  arrivals, Poisson's own noise (1/sqrt(n), ~2 %) moves it as much as the client does.
- ceiling: the client alone against a server that answers instantly (benchmarks/loopback_stub.py), Poisson,
  rising rates: the highest rate it sustains (<= 1 % late, achieved within 2 %) is where its figures stop being
  valid. On uvloop in a fresh process per protocol, as a client actor runs it, without Ray around it; after
  gRPC's rates, HTTP at its own ceiling again in the process gRPC ran in (what sharing a process with gRPC costs
  HTTP).

Every row carries the client's CPU per request (`client_cpu_us_per_request`, the actors' own accounting).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import local_tier, report  # noqa: E402
from benchmarks.load_tools import loopback_stub, perf_analyzer_env, run_perf_analyzer, run_wrk  # noqa: E402
from experiments.config.compose import compose  # noqa: E402

GOAL = {"throughput_ratio": 0.95, "p50_ratio": 1.1, "late_fraction": 0.01, "achieved_ratio": 0.98}
SECTIONS = ("triton", "serve", "open", "ceiling")
OPEN_FRACTIONS = (0.7, 0.85)
CEILING_RATES = (100, 200, 300, 400, 500, 700, 1000, 1500, 2000, 3000, 4000)


def _meets(row: dict[str, Any]) -> bool:
    return row["throughput_ratio"] >= GOAL["throughput_ratio"] and row["p50_ratio"] <= GOAL["p50_ratio"]


def _closed_row(record: Any, tool: str, theirs: dict[str, float], **fields: Any) -> dict[str, Any]:
    ours = record.metrics
    row = {**fields, "tool": tool,
           "tierbench_infer_s": ours["throughput_img_s"], "tool_infer_s": theirs["throughput"],
           "throughput_ratio": ours["throughput_img_s"] / theirs["throughput"],
           "tierbench_p50_ms": ours["latency_p50_ms"], "tool_p50_ms": theirs["p50_ms"],
           "p50_ratio": ours["latency_p50_ms"] / theirs["p50_ms"],
           "client_cpu_us_per_request": ours.get("client_cpu_us_per_request", float("nan")),
           "client_cpu_max": ours.get("client_cpu_util_max", float("nan")),
           "client_actors": record.params["client_actors_used"], "stable": record.tags.get("stable")}
    row["meets_goal"] = _meets(row)
    print(row, flush=True)
    return row


def _measure(cfg: Any, variant: str, protocol: str, load: float, backend: Any, handle: Any, node: Any,
             clients: Any) -> Any:
    from experiments.plan import planned_trial
    from experiments.run.trial import run_trial

    trial = planned_trial(cfg, variant, protocol, "tensor", 1, load)
    record = run_trial(cfg, trial, backend, handle, node, clients)
    if record.status != "ok":
        raise SystemExit(f"{trial.name}: {record.reason}")
    return record


def triton_rows(cfg: Any, args: Any, node: Any, options: dict[str, Any], run: int) -> list[dict[str, Any]]:
    """Closed loop vs perf_analyzer, then (section `open`) Poisson at fractions of perf_analyzer's best rate."""
    from experiments.measure.client_actor import ClientPool
    from experiments.run.server_group import build_backend

    binary, env = perf_analyzer_env()
    rows: list[dict[str, Any]] = []
    backend = build_backend(cfg, "triton_onnx", node, options)
    handle = backend.start()
    clients = ClientPool(cfg.experiment, options, 120).start()
    try:
        for protocol in args.protocols:
            best = 0.0
            for concurrency in args.concurrency:
                record = _measure(cfg, "triton_onnx", protocol, concurrency, backend, handle, node, clients)
                pa = run_perf_analyzer(binary, env, args.model, handle.urls[protocol], protocol, concurrency,
                                       args.window_s)
                best = max(best, pa["throughput"])
                rows.append(_closed_row(record, "perf_analyzer", pa, run=run, section="triton",
                                        server="triton_onnx", protocol=protocol, load=f"c{concurrency}"))
            if "open" in args.sections:
                open_cfg = compose([*_overrides(args), "experiment.load_mode=poisson"])
                for fraction in OPEN_FRACTIONS:
                    rate = round(best * fraction)
                    m = _measure(open_cfg, "triton_onnx", protocol, rate, backend, handle, node, clients).metrics
                    rows.append(_open_row(m, run=run, section="open", server="triton_onnx", protocol=protocol,
                                          load=f"poisson-r{rate} ({fraction:.0%} of perf_analyzer's best)"))
    finally:
        clients.close()
        backend.stop()
    return rows


def _open_row(m: dict[str, float], **fields: Any) -> dict[str, Any]:
    row = {**fields, "target_rps": m["target_rate_rps"], "offered_rps": m["offered_rate_rps"],
           "achieved_ratio": m["achieved_rate_rps"] / m["offered_rate_rps"],
           "achieved_vs_target": m["achieved_rate_rps"] / m["target_rate_rps"],
           "late_fraction": m["late_fraction"], "tierbench_p50_ms": m["latency_p50_ms"],
           "overloaded": bool(m["overloaded"]),
           "client_cpu_us_per_request": m.get("client_cpu_us_per_request", float("nan"))}
    row["meets_goal"] = (row["late_fraction"] <= GOAL["late_fraction"] and
                         row["achieved_ratio"] >= GOAL["achieved_ratio"] and not row["overloaded"])
    print(row, flush=True)
    return row


def serve_rows(cfg: Any, args: Any, node: Any, options: dict[str, Any], run: int) -> list[dict[str, Any]]:
    """Ray Serve over HTTP: the project's client vs wrk, the same request bytes, the same concurrency."""
    from experiments.measure.client_actor import ClientPool
    from experiments.run.server_group import build_backend
    from serving.clients.ray_serve_http import encode_request

    rows: list[dict[str, Any]] = []
    clients = ClientPool(cfg.experiment, options, 120).start()
    try:
        for variant in ("pytorch_direct", "pytorch"):
            backend = build_backend(cfg, variant, node, options)
            handle = backend.start()
            try:
                body, headers = encode_request(backend.client_spec(handle, "http", "tensor", 1))
                for concurrency in args.concurrency:
                    record = _measure(cfg, variant, "http", concurrency, backend, handle, node, clients)
                    wrk = run_wrk(handle.urls["http"], body, headers, concurrency, 3 * args.window_s)
                    rows.append(_closed_row(record, "wrk", wrk, run=run, section="serve", server=variant,
                                            protocol="http", load=f"c{concurrency}"))
            finally:
                backend.stop()
    finally:
        clients.close()
    return rows


CLIENTS = {"http": "serving.clients.triton_http.TritonHttpClient",
           "grpc": "serving.clients.triton_grpc.TritonGrpcClient"}


def _at_rate(url: str, protocol: str, rate: float, window_s: float) -> dict[str, float]:
    """One Poisson rate against the stub, in this process, on uvloop: warm-up, then two windows."""
    import uvloop

    from experiments.config.choices import LoadMode
    from experiments.measure.load import OpenLoopLoad
    from experiments.measure.metrics import client_metrics, open_loop_metrics, window_metrics
    from experiments.measure.samples import WindowSamples
    from serving.clients.base import ClientSpec, load_client

    spec = ClientSpec(target=CLIENTS[protocol], url=url, model_name="stub", input_format="tensor", batch_size=1,
                      input_shape=(3, 224, 224), output_shape=(1000,))

    async def measure() -> dict[str, float]:
        client = load_client(spec)
        await client.open()
        load = OpenLoopLoad(client.infer, rate, LoadMode.POISSON, 30, 1, max_in_flight=1024)
        try:
            load.start()
            await load.wait_warm(min_requests=50, min_seconds=1.0, timeout_s=30)
            start = load.now() + 0.01
            parts = [await load.collect(start + i * window_s, start + (i + 1) * window_s) for i in range(2)]
        finally:
            await load.stop()
            await client.close()
        samples = WindowSamples.merge(parts)
        return {**window_metrics(samples, 1.0), **open_loop_metrics(samples, rate), **client_metrics(samples)}

    return uvloop.run(measure())


def _ceiling_of(urls: dict[str, str], protocol: str, window_s: float, run: int,
                http_ceiling: float | None) -> list[dict[str, Any]]:
    """Rising rates for one protocol until one misses the goal; after gRPC, HTTP at its own ceiling again in the
    same process (what sharing a client process with gRPC costs HTTP: why `ClientPool` keeps them apart)."""
    rows = []
    from experiments.measure.load import LoadError

    for rate in CEILING_RATES:
        fields = {"run": run, "section": "ceiling", "server": "loopback stub", "protocol": protocol,
                  "load": f"poisson-r{rate}"}
        try:
            rows.append(_open_row(_at_rate(urls[protocol], protocol, rate, window_s), **fields))
        except LoadError as exc:  # the client fell so far behind that requests failed: past its ceiling
            rows.append({**fields, "target_rps": rate, "meets_goal": False, "error": " ".join(str(exc).split())})
        if not rows[-1]["meets_goal"]:
            break
    if protocol == "grpc" and http_ceiling:
        rate = http_ceiling
        rows.append(_open_row(_at_rate(urls["http"], "http", rate, window_s), run=run, section="ceiling",
                              server="loopback stub", protocol="http, in the process gRPC ran in",
                              load=f"poisson-r{rate}"))
    return rows


def ceiling_rows(args: Any, run: int) -> list[dict[str, Any]]:
    """Per protocol, in a fresh process of its own (as the sweep's client actors are), rising Poisson rates against
    the instant stub until the client falls behind."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows: list[dict[str, Any]] = []
    with loopback_stub(18700 + run * 2, 18701 + run * 2) as urls:
        for protocol in sorted(args.protocols, key=lambda p: p != "http"):  # HTTP's ceiling first
            http_ceiling = max((r["target_rps"] for r in rows if r["protocol"] == "http" and r["meets_goal"]),
                               default=None)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
                rows += fresh.submit(_ceiling_of, urls, protocol, args.window_s, run, http_ceiling).result()
    return rows


def _overrides(args: Any) -> list[str]:
    return [f"model={args.model}", f"experiment.window_s={args.window_s}", "experiment.warmup_s=2",
            "experiment.warmup_requests=50", "experiment.stability.max_windows=10",
            "cluster.serve_direct_ingress=true"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"])
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=1, help="repeat every section (the goal asks 3 runs of 3)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()

    cfg = compose(_overrides(args))
    rows: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        if {"triton", "open", "serve"} & set(args.sections):
            with local_tier(cfg) as (node, options):
                if {"triton", "open"} & set(args.sections):
                    rows += triton_rows(cfg, args, node, options, run)
                if "serve" in args.sections:
                    rows += serve_rows(cfg, args, node, options, run)
        if "ceiling" in args.sections:
            rows += ceiling_rows(args, run)
    columns = ["run", "section", "server", "protocol", "load", "tool", "tierbench_infer_s", "tool_infer_s",
               "throughput_ratio", "tierbench_p50_ms", "tool_p50_ms", "p50_ratio", "target_rps", "offered_rps",
               "achieved_ratio", "achieved_vs_target", "late_fraction", "client_cpu_us_per_request", "client_cpu_max",
               "client_actors", "meets_goal", "error"]
    sections = "" if set(args.sections) == set(SECTIONS) else "_" + "_".join(args.sections)
    report(f"client_overhead_{args.model}{sections}", columns, rows, {
        "model": args.model, "window_s": args.window_s, "runs": args.runs, "goal": GOAL,
        "rows_meeting_goal": f"{sum(r['meets_goal'] for r in rows)} of {len(rows)}"})


if __name__ == "__main__":
    main()
