"""Client overhead: the sweep's load engines against a standalone perf_analyzer (C++, from the tritonclient wheel) on
the same server, on loopback, batch 1, the tiny model (~1 ms of service: the client is everything there).

    python benchmarks/client_overhead.py [--model tiny] [--runs 3] [--sections closed open ceiling bodies]
                                         [--servers triton_onnx pytorch] [--engines compiled python]
                                         [--set KEY=VALUE ...]  (more Hydra overrides for the trials)

perf_analyzer and wrk run at the scheduling priority the engine had (the trial's `client_niceness`: 0 where the
engine may raise its own, ahead of the servers Ray starts at nice 15; else 15), so neither client gets the cores
ahead of the server where the other did not.

- closed: every server (Triton `triton_onnx`, Ray Serve `pytorch` through its proxy, both speaking the Open
  Inference Protocol), HTTP and gRPC, concurrency 1/4/8/16: a trial measured exactly as a sweep measures it
  (`run_trial`, client actors, windows, stability rule) with each engine, then perf_analyzer at the same
  concurrency (its own stability rule over the same window length). Goals: throughput >= 0.95x and p50 <= 1.1x
  perf_analyzer's; the engine's CPU per request <= 1.2x perf_analyzer's own (measured: the kernel's accounting of
  the perf_analyzer process over its run, over the requests Triton counted in that time; for Serve, which counts
  nothing, its CPU use over its throughput). (`--request-count`, which would fix the number of requests, hung
  perf_analyzer 2.51 at gRPC c8 with 2.5 GB of request copies.) Independent checks on every row: Triton's own
  count of inferences over the windows (`server_count_ratio`, 0.97-1.03), and for Serve over HTTP, wrk (C, Debian's
  package) with the engine's very request bytes, within 10 %. Then per server and concurrency, the gRPC-over-HTTP
  throughput speedup against perf_analyzer's own (within 10 %).
- open: Triton, Poisson arrivals at 85 % of the highest rate perf_analyzer reached for the protocol: requests sent
  more than 5 ms late (goal <= 1 %), the rate achieved (requests sent) against the target (goal within 2 %; over n
  arrivals Poisson's own noise is 1/sqrt(n)) and against the arrivals the schedule put in the windows (offered).
- ceiling: the engine alone against a server that answers instantly (benchmarks/loopback_stub.py, Python on
  uvloop), rising Poisson rates: the highest it sustains (<= 1 % late, achieved within 2 %), with its CPU per
  request; the stub shares the machine's cores, so where the stub is the limit the engine's own ceiling is higher.
- bodies: the compiled engine's CPU per request sending one request again and again against a pool of 64 distinct
  ones in turn (a client's distinct input images: 64 x 602 KB, float32 [1, 3, 224, 224], more than a CPU's caches
  hold), HTTP/1.1 and gRPC, closed loops at `--body-concurrency`, to the same instant stub: the engine process's
  user + system time (/proc) from its ready record to its stop, over the requests answered in between; its start-up
  CPU (reading the bodies) apart. The two alternate, round by round; the pool's row carries its ratio to the one
  body's (the median of the rounds' ratios). A figure to watch, no goal.

Every row carries the client's CPU per request. Ratios are from one run; `--runs 3` repeats everything.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import local_tier, report  # noqa: E402
from benchmarks.load_tools import (  # noqa: E402
    loopback_stub,
    perf_analyzer_cpu_us,
    perf_analyzer_env,
    run_perf_analyzer,
    run_wrk,
    split_http_request,
)
from experiments.config.compose import load_config  # noqa: E402

GOAL = {"throughput_ratio": 0.95, "p50_ratio": 1.1, "cpu_ratio": 1.2, "server_count": (0.97, 1.03), "wrk": 0.10,
        "speedup_agreement": 0.10, "late_fraction": 0.01, "achieved_vs_target": 0.02}
SECTIONS = ("closed", "open", "ceiling", "bodies")
OPEN_FRACTION = 0.85
CEILING_RATES = (500, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 8000)


def perf_analyzer_target(wire: Any, spec: Any) -> tuple[str, str]:
    """(url, model) for perf_analyzer from the engine's own request: host:port plus the path before `/v2` (Ray
    Serve's route prefix), and the OIP model the request names."""
    if wire.protocol == "http1":
        from benchmarks.load_tools import split_http_request

        path = split_http_request(wire.payload)[0]
        prefix, _, rest = path.partition("/v2/models/")
        return f"{wire.host}:{wire.port}{prefix}", rest.split("/")[0]
    from tritonclient.grpc import service_pb2

    from serving.clients.wire import grpc_message

    return f"{wire.host}:{wire.port}", service_pb2.ModelInferRequest.FromString(grpc_message(wire.payload)).model_name


def _trial(cfg: Any, variant: str, protocol: str, load: float, backend: Any, handle: Any, node: Any,
           clients: Any) -> Any:
    from experiments.plan import planned_trial
    from experiments.run.trial import run_trial

    record = run_trial(cfg, planned_trial(cfg, variant, protocol, "tensor", 1, load), backend, handle, node, clients)
    if record.status != "ok":
        raise SystemExit(f"{record.name}: {record.reason}")
    return record


def _closed_row(record: Any, pa: dict[str, float], pa_cpu: float, wrk: dict[str, float] | None,
                **fields: Any) -> dict[str, Any]:
    m = record.metrics
    row = {**fields, "engine": record.params["load_engine"],
           "tierbench_infer_s": m["throughput_img_s"], "pa_infer_s": pa["throughput"],
           "throughput_ratio": m["throughput_img_s"] / pa["throughput"],
           "tierbench_p50_ms": m["latency_p50_ms"], "pa_p50_ms": pa["p50_ms"],
           "p50_ratio": m["latency_p50_ms"] / pa["p50_ms"], "pa_stability_pct": pa["stability_pct"],
           "client_cpu_us_per_request": m.get("client_cpu_us_per_request", float("nan")), "pa_cpu_us": pa_cpu,
           "client_actors": record.params["client_actors_used"], "stable": record.tags.get("stable"),
           "server_count_ratio": m.get("server_count_ratio", float("nan"))}
    row["cpu_ratio"] = row["client_cpu_us_per_request"] / pa_cpu
    checks = [row["throughput_ratio"] >= GOAL["throughput_ratio"], row["p50_ratio"] <= GOAL["p50_ratio"],
              row["cpu_ratio"] <= GOAL["cpu_ratio"]]
    if "server_count_ratio" in m:
        low, high = GOAL["server_count"]
        checks.append(low <= m["server_count_ratio"] <= high)
    if wrk is not None:
        row.update(wrk_infer_s=wrk["throughput"], wrk_ratio=m["throughput_img_s"] / wrk["throughput"])
        checks.append(abs(row["wrk_ratio"] - 1) <= GOAL["wrk"])
    row["meets_goal"] = all(checks)
    print(row, flush=True)
    return row


def _perf_analyzer_twice(*args: Any) -> dict[str, float]:
    """perf_analyzer, once more if it fails (2.51 once lost every connection mid-run: "Socket closed")."""
    try:
        return run_perf_analyzer(*args)
    except RuntimeError as exc:
        print(f"perf_analyzer failed, trying once more: {' '.join(str(exc).split())[-300:]}", flush=True)
        return run_perf_analyzer(*args)


def _wrk(client: Any, concurrency: int, seconds: float, niceness: int | None) -> dict[str, float]:
    wire = client.wire_request()
    path, body, headers = split_http_request(wire.payload)
    return run_wrk(f"http://{wire.host}:{wire.port}{path}", body, headers, concurrency, seconds, niceness)


def closed_rows(cfg: Any, args: Any, node: Any, options: dict[str, Any], run: int) -> list[dict[str, Any]]:
    """Per server: the engines' trials beside perf_analyzer's, every protocol and concurrency; then the open-loop
    rows on Triton, at 85 % of perf_analyzer's best rate there."""
    from experiments.measure.client_actor import ClientPool
    from experiments.run.server_group import build_backend
    from serving.clients.base import load_client

    binary, env = perf_analyzer_env()
    rows: list[dict[str, Any]] = []
    clients = ClientPool(cfg.experiment, options, 180).start()
    try:
        for variant in args.servers:
            backend = build_backend(cfg, variant, node, options)
            handle = backend.start()
            try:
                for protocol in args.protocols:
                    client = load_client(backend.client_spec(handle, protocol, "tensor", 1))
                    url, model = perf_analyzer_target(client.wire_request(), client.spec)
                    best = 0.0
                    for concurrency in args.concurrency:
                        fields = {"run": run, "section": "closed", "server": variant, "protocol": protocol,
                                  "load": f"c{concurrency}"}
                        records = []
                        for engine in args.engines:
                            clients.exp.load_engine = engine
                            records.append(_trial(cfg, variant, protocol, concurrency, backend, handle, node, clients))
                        niceness = records[0].params["client_niceness"]
                        before = backend.server_counters(handle)
                        try:
                            pa = _perf_analyzer_twice(binary, env, model, url, protocol, concurrency, args.window_s,
                                                      niceness)
                        except RuntimeError as exc:  # twice: recorded as what happened, and the rows go on
                            rows.append({**fields, "meets_goal": False, "error": " ".join(str(exc).split())[-400:]})
                            print(rows[-1], flush=True)
                            continue
                        after = backend.server_counters(handle)
                        sent = backend.served_images(before, after) if before and after else None
                        pa_cpu, pa_cpu_how = perf_analyzer_cpu_us(pa, sent)
                        best = max(best, pa["throughput"])
                        wrk = (_wrk(client, concurrency, 3 * args.window_s, niceness)
                               if protocol == "http" and variant.startswith("pytorch") else None)
                        for record in records:
                            rows.append(_closed_row(record, pa, pa_cpu, wrk, **fields, pa_cpu_from=pa_cpu_how,
                                                    client_niceness=niceness))
                    if "open" in args.sections and variant.startswith("triton"):
                        rows += open_rows(cfg, args, variant, protocol, round(best * OPEN_FRACTION), backend, handle,
                                          node, clients, run)
            finally:
                backend.stop()
    finally:
        clients.close()
    return rows + speedup_rows(rows)


def speedup_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gRPC over HTTP throughput, ours and perf_analyzer's, per run, server, engine and concurrency."""
    out = []
    closed = [r for r in rows if r["section"] == "closed" and "error" not in r]
    for r in closed:
        if r["protocol"] != "grpc":
            continue
        http = next((h for h in closed if h["protocol"] == "http" and
                     all(h[k] == r[k] for k in ("run", "server", "engine", "load"))), None)
        if http is None:
            continue
        ours = r["tierbench_infer_s"] / http["tierbench_infer_s"]
        theirs = r["pa_infer_s"] / http["pa_infer_s"]
        row = {"run": r["run"], "section": "speedup", "server": r["server"], "protocol": "grpc/http",
               "load": r["load"], "engine": r["engine"], "tierbench_speedup": ours, "pa_speedup": theirs,
               "speedup_agreement": ours / theirs}
        row["meets_goal"] = abs(row["speedup_agreement"] - 1) <= GOAL["speedup_agreement"]
        print(row, flush=True)
        out.append(row)
    return out


def open_rows(cfg: Any, args: Any, variant: str, protocol: str, rate: float, backend: Any, handle: Any, node: Any,
              clients: Any, run: int) -> list[dict[str, Any]]:
    """Poisson arrivals at `rate` with each engine: late sends, rate achieved against the target and the offer."""
    from experiments.plan import planned_trial
    from experiments.run.trial import run_trial

    open_cfg = load_config([*_overrides(args), "experiment.load_mode=poisson",
                            f"experiment.window_s={args.open_window_s}"])
    rows = []
    for engine in args.engines:
        open_cfg.experiment.load_engine = clients.exp.load_engine = engine
        trial = planned_trial(open_cfg, variant, protocol, "tensor", 1, rate)
        record = run_trial(open_cfg, trial, backend, handle, node, clients)
        if record.status != "ok":
            raise SystemExit(f"{record.name}: {record.reason}")
        rows.append(_open_row(record.metrics, run=run, section="open", server=variant, protocol=protocol,
                              engine=engine, load=f"poisson-r{rate:g} ({OPEN_FRACTION:.0%} of perf_analyzer's best)"))
    return rows


def _open_row(m: dict[str, float], **fields: Any) -> dict[str, Any]:
    row = {**fields, "target_rps": m["target_rate_rps"], "offered_rps": m["offered_rate_rps"],
           "achieved_vs_target": m["achieved_rate_rps"] / m["target_rate_rps"],
           "achieved_vs_offered": m["achieved_rate_rps"] / m["offered_rate_rps"],
           "arrivals": m["request_count"], "late_fraction": m["late_fraction"],
           "tierbench_p50_ms": m["latency_p50_ms"], "overloaded": bool(m["overloaded"]),
           "client_cpu_us_per_request": m.get("client_cpu_us_per_request", float("nan"))}
    row["meets_goal"] = (row["late_fraction"] <= GOAL["late_fraction"] and not row["overloaded"] and
                         abs(row["achieved_vs_target"] - 1) <= GOAL["achieved_vs_target"])
    print(row, flush=True)
    return row


CLIENTS = {"http": "serving.triton.clients.TritonHttpClient",
           "grpc": "serving.triton.clients.TritonGrpcClient"}


def _at_rate(url: str, protocol: str, engine: str, rate: float, window_s: float) -> dict[str, float]:
    """One Poisson rate against the stub, without Ray: warm-up, then two windows."""
    import uvloop

    from experiments.config.choices import LoadEngine, LoadMode
    from experiments.measure.engine.compiled_load import CompiledLoad
    from experiments.measure.load import LoadPoint, OpenLoopLoad
    from experiments.measure.metrics import client_metrics, open_loop_metrics, window_metrics
    from experiments.measure.samples import WindowSamples
    from serving.clients.base import ClientSpec, load_client

    spec = ClientSpec(target=CLIENTS[protocol], url=url, model_name="stub", input_format="tensor", batch_size=1,
                      input_shape=(3, 224, 224), output_shape=(1000,))

    async def measure() -> dict[str, float]:
        client = load_client(spec)
        if engine == LoadEngine.COMPILED:
            load = CompiledLoad(client.wire_request(), LoadPoint(LoadMode.POISSON, rate), 30, 1, horizon_s=120,
                                check_response=client.check_wire_response)
            await load.open()
        else:
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

    return uvloop.run(measure()) if engine != LoadEngine.COMPILED else asyncio.run(measure())


def _ceiling_of(urls: dict[str, str], protocol: str, engine: str, window_s: float, run: int) -> list[dict[str, Any]]:
    """Rising rates for one protocol and engine until one misses the goal; the stub's CPU use beside each (near a
    full core: the stub, not the client, is the limit there)."""
    import time

    from benchmarks.load_tools import process_cpu_s
    from experiments.measure.load import LoadError

    rows = []
    for rate in CEILING_RATES:
        fields = {"run": run, "section": "ceiling", "server": "loopback stub", "protocol": protocol, "engine": engine,
                  "load": f"poisson-r{rate}"}
        try:
            cpu, wall = process_cpu_s(int(urls["pid"])), time.monotonic()
            metrics = _at_rate(urls[protocol], protocol, engine, rate, window_s)
            fields["stub_cpu_util"] = (process_cpu_s(int(urls["pid"])) - cpu) / (time.monotonic() - wall)
            rows.append(_open_row(metrics, **fields))
        except LoadError as exc:  # the client fell so far behind that requests failed: past its ceiling
            rows.append({**fields, "target_rps": rate, "meets_goal": False, "error": " ".join(str(exc).split())})
        if not rows[-1]["meets_goal"]:
            break
    return rows


def ceiling_rows(args: Any, run: int) -> list[dict[str, Any]]:
    """Per protocol and engine, in a fresh process of its own (as the sweep's client actors are), rising Poisson rates
    against the instant stub until the client falls behind."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows: list[dict[str, Any]] = []
    with loopback_stub(18700 + run * 2, 18701 + run * 2) as urls:
        for engine in args.engines:
            for protocol in args.protocols:
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
                    rows += fresh.submit(_ceiling_of, urls, protocol, engine, args.window_s, run).result()
    return rows


TENSOR_SHAPE = (1, 3, 224, 224)  # float32: 602,112 bytes, a ResNet input
BODY_POOLS = (1, 64)


def _pool_wire(url: str, protocol: str, count: int) -> Any:
    """`count` distinct requests of a random float32 [1, 3, 224, 224] each, as Triton's clients send them: HTTP/1.1
    OIP with the tensor as binary data after its JSON header, or a gRPC ModelInferRequest with raw contents."""
    import json

    import numpy as np

    from serving.clients.http1 import build_request
    from serving.clients.wire import grpc_wire, http1_wire

    rng = np.random.default_rng(0)
    tensors = [rng.random(TENSOR_SHAPE, dtype=np.float32).tobytes() for _ in range(count)]
    if protocol == "http":
        url = f"http://{url}/v2/models/stub/infer"
        header = json.dumps({"inputs": [{"name": "input", "shape": list(TENSOR_SHAPE), "datatype": "FP32",
                                         "parameters": {"binary_data_size": len(tensors[0])}}],
                             "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}
        return http1_wire(url, [build_request("POST", url, header + t, headers) for t in tensors])
    from tritonclient.grpc import service_pb2

    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=list(TENSOR_SHAPE))
    return grpc_wire(url, "/inference.GRPCInferenceService/ModelInfer", [service_pb2.ModelInferRequest(
        model_name="stub", inputs=[tensor], raw_input_contents=[t]).SerializeToString() for t in tensors])


def _engine_cpu(wire: Any, concurrency: int, seconds: float, folder: Path) -> dict[str, float]:
    """The compiled engine, run directly (its own process: nothing else's CPU counted), a closed loop of
    `concurrency` for `seconds`: its user + system CPU from the ready record to the stop, the requests answered in
    between, and its CPU before the load started (reading the bodies, connecting)."""
    import signal
    import subprocess
    import threading
    import time

    import numpy as np

    from benchmarks.load_tools import process_cpu_s
    from experiments.measure.engine import records
    from experiments.measure.engine.build import engine_binary
    from experiments.measure.engine.compiled_load import wire_arguments

    args = [str(engine_binary()), *wire_arguments(wire, folder), "--closed", str(concurrency), "--nice", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready = proc.stdout.read(records.RECORD.itemsize)
    if len(ready) < records.RECORD.itemsize:
        raise RuntimeError(f"the engine did not start: {proc.communicate()[1].decode()[-500:]}")
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read1(1 << 16), b"")))
    reader.start()
    start_cpu, start_ns = process_cpu_s(proc.pid), time.monotonic_ns()
    time.sleep(seconds)
    end_cpu, end_ns = process_cpu_s(proc.pid), time.monotonic_ns()
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1].decode()
    reader.join(10)
    batch = records.parse(bytearray(b"".join(chunks)))
    if proc.returncode != 0 or np.any(batch["kind"] == records.Kind.FAILED):  # an instant stub fails nothing
        raise RuntimeError(f"the engine failed (exit {proc.returncode}): {err[-500:]}")
    done = batch[batch["kind"] == records.Kind.DONE]
    answered = int(np.sum((done["done_ns"] >= start_ns) & (done["done_ns"] < end_ns)))
    return {"requests": answered, "cpu_s": end_cpu - start_cpu, "wall_s": (end_ns - start_ns) / 1e9,
            "startup_cpu_s": start_cpu}


def bodies_rows(args: Any, run: int) -> list[dict[str, Any]]:
    """Per protocol and concurrency, the engine's CPU per request with one body and with a pool of 64, against the
    instant stub, in `--body-rounds` rounds that alternate the two (a busy machine's drift falls on both alike): each
    row's median over its rounds; the pool's row carries the median of each round's ratio to the one body's."""
    import statistics
    import tempfile

    rows: list[dict[str, Any]] = []
    with loopback_stub(18720 + run * 2, 18721 + run * 2) as urls:
        for protocol in args.protocols:
            pools = {count: _pool_wire(urls[protocol], protocol, count) for count in BODY_POOLS}
            for concurrency in args.body_concurrency:
                rounds: dict[int, list[dict[str, float]]] = {count: [] for count in pools}
                for _ in range(args.body_rounds):
                    for count, wire in pools.items():
                        with tempfile.TemporaryDirectory(prefix="tierbench-bodies-") as folder:
                            rounds[count].append(_engine_cpu(wire, concurrency, args.body_seconds, Path(folder)))
                for count, wire in pools.items():
                    us = [m["cpu_s"] / m["requests"] * 1e6 for m in rounds[count]]
                    row = {"run": run, "section": "bodies", "server": "loopback stub", "protocol": protocol,
                           "load": f"c{concurrency}", "engine": "compiled", "bodies": count,
                           "body_bytes": len(wire.payload), "rounds": len(us),
                           "requests": sum(m["requests"] for m in rounds[count]),
                           "requests_per_s": statistics.median(m["requests"] / m["wall_s"] for m in rounds[count]),
                           "engine_cpu_us_per_request": statistics.median(us), "cpu_us_min": min(us),
                           "cpu_us_max": max(us),
                           "startup_cpu_ms": statistics.median(m["startup_cpu_s"] for m in rounds[count]) * 1e3}
                    if count != BODY_POOLS[0]:
                        single = [m["cpu_s"] / m["requests"] for m in rounds[BODY_POOLS[0]]]
                        row["pool_cpu_ratio"] = statistics.median(
                            m["cpu_s"] / m["requests"] / one for m, one in zip(rounds[count], single, strict=True))
                    print(row, flush=True)
                    rows.append(row)
    return rows


def _overrides(args: Any) -> list[str]:
    return [f"model={args.model}", f"experiment.window_s={args.window_s}", "experiment.warmup_s=2",
            "experiment.warmup_requests=50", "experiment.stability.max_windows=10", *args.set]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--protocols", nargs="+", default=["http", "grpc"])
    parser.add_argument("--servers", nargs="+", default=["triton_onnx", "pytorch"])
    parser.add_argument("--engines", nargs="+", default=["compiled"], choices=["compiled", "python"])
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--open-window-s", type=float, default=4.0,
                        help="open-loop windows: longer, so Poisson's own noise in the offered rate stays ~1 %%")
    parser.add_argument("--runs", type=int, default=1, help="repeat every section (the goal asks 3 runs of 3)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--body-concurrency", type=int, nargs="+", default=[1, 8],
                        help="bodies: the closed loops' concurrencies")
    parser.add_argument("--body-seconds", type=float, default=2.0, help="bodies: seconds measured per round")
    parser.add_argument("--body-rounds", type=int, default=5, help="bodies: rounds, one body and the pool in turn")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more Hydra overrides for the sweep's trials (e.g. experiment.inputs.pool_mib=0.5)")
    args = parser.parse_args()

    cfg = load_config(_overrides(args))
    rows: list[dict[str, Any]] = []
    try:
        for run in range(1, args.runs + 1):
            if {"closed", "open"} & set(args.sections):
                with local_tier(cfg) as (node, options):
                    rows += closed_rows(cfg, args, node, options, run)
            if "ceiling" in args.sections:
                rows += ceiling_rows(args, run)
            if "bodies" in args.sections:
                rows += bodies_rows(args, run)
    finally:  # what was measured is written, also when a later run fails
        _write(args, rows)


BODIES_COLUMNS = ["bodies", "body_bytes", "rounds", "requests", "requests_per_s", "engine_cpu_us_per_request",
                  "cpu_us_min", "cpu_us_max", "startup_cpu_ms", "pool_cpu_ratio"]


def _write(args: Any, rows: list[dict[str, Any]]) -> None:
    columns = ["run", "section", "server", "protocol", "load", "engine", "tierbench_infer_s", "pa_infer_s",
               "throughput_ratio", "tierbench_p50_ms", "pa_p50_ms", "p50_ratio", "client_cpu_us_per_request",
               "pa_cpu_us", "cpu_ratio", "client_niceness", "server_count_ratio", "wrk_ratio", "tierbench_speedup",
               "pa_speedup", "speedup_agreement", "target_rps", "offered_rps", "achieved_vs_target",
               "achieved_vs_offered", "late_fraction", "stub_cpu_util", "meets_goal", "error"]
    if args.sections == ["bodies"]:  # its own columns only
        columns = ["run", "section", "protocol", "load", *BODIES_COLUMNS, "error"]
    elif "bodies" in args.sections:
        columns[-2:-2] = BODIES_COLUMNS
    sections = "" if set(args.sections) == set(SECTIONS) else "_" + "_".join(args.sections)
    report(f"client_overhead_{args.model}{sections}", columns, rows, {
        "model": args.model, "window_s": args.window_s, "runs": args.runs, "engines": args.engines, "set": args.set,
        "goal": GOAL,
        "rows_meeting_goal": f"{sum(r['meets_goal'] for r in rows if 'meets_goal' in r)} of "
                             f"{sum('meets_goal' in r for r in rows)}"})


if __name__ == "__main__":
    main()
