"""Does an endpoint trial measure what a launched trial measures? Each server is measured twice in one run: launched
by a sweep (`experiment.backends=[<backend>]`), then started outside any sweep, as its user would start it, and
measured as an endpoint (`experiment=endpoint`), with the same model, settings, protocols, batches and load. Goal:
p50 and throughput within 10 %.

Servers, each started outside as its user would start it, at the niceness a launched server runs at:
- the FastAPI service: uvicorn with the service's config file (the command its deploy files hold); OIP over HTTP;
- the bundled Triton: `tritonserver` with the model folder the launched sweep rendered (Python backend, ONNX
  Runtime); OIP over HTTP and gRPC, its metrics read around the windows both times (`metrics_url`);
- TorchServe: the model archived with tierbench's handler and served with the launched settings (`TorchServeHost`,
  outside Ray); `kind=torchserve`, REST and gRPC, its metrics read both times;
- a Ray Serve application: the deployment of the `pytorch` entry with the options its `serve_config.yaml` holds, on
  a Ray of its own (`serve.run` in a process of its own, Serve's gRPC proxy with the config's servicers); OIP over
  HTTP at its route prefix, and over gRPC with the application named in the request metadata (`grpc_metadata`).

With `--noise`, each server is launched twice: how far two launched runs of the same server differ (the machine's own
run-to-run spread) is set beside how far the endpoint run differs, point by point.

With `--rounds N`, launched and endpoint runs alternate N times (launched, endpoint, launched, ...: a drift of the
machine falls on both alike) and each point compares the medians of its N figures; each round's ratios and the
launched runs' own spread (slowest over fastest) come beside them.

    python benchmarks/endpoint_agreement.py [--model resnet18] [--window-s 2] [--servers fastapi triton torchserve
        ray_serve] [--batches 1 8] [--concurrency 1 4] [--noise | --rounds N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

GOAL = 0.10
# A launched server runs at the niceness of the Ray worker (its host actor) that starts it, Ray's default 15 (`ps`
# shows it); the clients too. Started outside at 0, a server would win the CPU from the clients on a small machine
# and serve faster than the launched one for that reason alone: the servers started outside get the same niceness.
LAUNCHED_NICENESS = 15


def renice_tree(pid: int, niceness: int) -> None:
    """Every thread of `pid` and of its descendants at `niceness` (Linux keeps it per thread)."""
    import psutil

    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        for task in os.listdir(f"/proc/{process.pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(task), niceness)
SERVERS = {"fastapi": ("fastapi", ["http"]), "triton": ("triton_onnx", ["http", "grpc"]),
           "torchserve": ("torchserve", ["http", "grpc"]), "ray_serve": ("pytorch", ["http", "grpc"])}


def sweep(work: Path, sweep_id: str, overrides: list[str]) -> dict[tuple[str, int, int], dict[str, float]]:
    """Run one sweep (its own local Ray, stopped after); its ok trials' p50 and throughput by (protocol, b, c)."""
    status, records = run_sweep(work, sweep_id, overrides)
    if status != 0:
        raise RuntimeError(f"{sweep_id} exited {status}: see {work / f'{sweep_id}.log'}")
    out = {}
    for record in records:
        if record["status"] != "ok":
            continue
        p, m = record["params"], record["metrics"]
        out[(p["protocol"], int(p["batch_size"]), int(p["concurrency"]))] = {
            "p50_ms": m["latency_p50_ms"], "img_s": m["throughput_img_s"], "engine": p.get("load_engine", "")}
    return out


def wait_ready(url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} was not ready within {timeout_s:g} s")


def stop(process: subprocess.Popen, log: Any, timeout_s: float) -> None:
    """Stop a server started outside (SIGTERM, then SIGKILL past `timeout_s`) and close its log."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


@contextmanager
def fastapi_outside(cfg: Any, work: Path) -> Any:
    """The FastAPI service as its deploy files start it: uvicorn with the service's config file."""
    from dataclasses import asdict

    from serving.fastapi.app import CONFIG_VARIABLE
    from serving.fastapi.host import uvicorn_command
    from serving.process import free_ports

    settings = cfg.backends["fastapi"]
    config = {"model": cfg.model.to_dict(), "device": "cpu", "torch_threads": settings.torch_threads,
              "options": asdict(settings.torch_options()),
              "warmup_batch_sizes": [int(b) for b in cfg.experiment.batch_sizes]}
    path = work / "fastapi_config.json"
    path.write_text(json.dumps(config))
    (port,) = free_ports(1, "127.0.0.1")
    log = open(work / "fastapi_outside.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(uvicorn_command("127.0.0.1", port, settings.workers), stdout=log,
                               stderr=subprocess.STDOUT, env={**os.environ, CONFIG_VARIABLE: str(path)},
                               preexec_fn=lambda: os.nice(LAUNCHED_NICENESS))  # noqa: PLW1509 - no threads yet
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        yield [f"backends.endpoint.url={url}"]
    finally:
        stop(process, log, 20)


@contextmanager
def triton_outside(cfg: Any, work: Path, launched_id: str) -> Any:
    """The bundled tritonserver serving the model folder the launched sweep rendered (its config.pbtxt) with the
    Python backend's model file."""
    from serving.triton.installation import BundledTriton
    from serving.triton.repository import PYTHON_MODEL_FILE
    from serving.triton.server import TritonServer

    (rendered,) = (work / "runs" / launched_id).glob("*/servers/triton_onnx/config.pbtxt")
    repository = work / "triton_repository"
    model_dir = repository / cfg.model.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(rendered, model_dir / "config.pbtxt")
    shutil.copy(PYTHON_MODEL_FILE, model_dir / "1" / "model.py")
    server = TritonServer(BundledTriton.discover(), repository, cfg.model.name, work / "triton_outside.log")
    endpoints = server.start(timeout_s=300)
    try:
        renice_tree(server.process.pid, LAUNCHED_NICENESS)  # the server and its Python-backend stubs
        yield [f"backends.endpoint.url=http://{endpoints.host}:{endpoints.http_port}",
               f"backends.endpoint.grpc_url={endpoints.host}:{endpoints.grpc_port}",
               f"backends.endpoint.metrics_url={endpoints.metrics_url}"]
    finally:
        server.stop()


def local_backend(cfg: Any, variant: str) -> Any:
    """The backend of entry `variant` as a sweep of this machine builds it (its settings, its variant)."""
    import socket

    from experiments.run.server_group import build_backend
    from serving.node import NodeInfo

    node = NodeInfo(hostname=socket.gethostname(), ip="127.0.0.1", ray_node_id="", cpu_model="",
                    cpu_count=os.cpu_count() or 1)
    return build_backend(cfg, variant, node, {})


@contextmanager
def torchserve_outside(cfg: Any, work: Path) -> Any:
    """TorchServe serving the model with tierbench's handler and the `torchserve` entry's settings, started outside
    Ray and any sweep."""
    from serving.torchserve.host import TorchServeHost

    host = TorchServeHost(cfg.model.to_dict(), local_backend(cfg, "torchserve").variant(), "127.0.0.1")
    try:
        ports = host.start(300)["ports"]
        renice_tree(host.server.process.pid, LAUNCHED_NICENESS)  # its launcher, frontend and workers
        yield ["backends.endpoint.kind=torchserve", f"backends.endpoint.url=http://127.0.0.1:{ports['inference']}",
               f"backends.endpoint.grpc_url=127.0.0.1:{ports['grpc_inference']}",
               f"backends.endpoint.metrics_url=http://127.0.0.1:{ports['metrics']}/metrics"]
    finally:
        logs = host.stop(30)
        (work / "torchserve_outside.log").write_text(logs.get("ts_log.log", ""))


RAY_SERVE_LAUNCHER = """
import signal, sys, threading, yaml, ray
from ray import serve
from serving.ray_serve.deployment import TorchImageClassifier
config_path, port_file = sys.argv[1], sys.argv[2]
config = yaml.safe_load(open(config_path))
(app,) = config["applications"]
(deployment,) = app["deployments"]
ray.init(address="local", include_dashboard=False)
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[3])},
            grpc_options={**config["grpc_options"], "port": int(sys.argv[4])})
options = {k: v for k, v in deployment.items() if k != "name"}
serve.run(TorchImageClassifier.options(**options).bind(**app["args"]), name=app["name"],
          route_prefix=app["route_prefix"])
open(port_file, "w").write(sys.argv[3])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
stop.wait()
serve.shutdown()
ray.shutdown()
"""


@contextmanager
def ray_serve_outside(cfg: Any, work: Path) -> Any:
    """The `pytorch` entry's Serve application, from the `serve_config.yaml` its deploy files hold, run by
    `serve.run` on a Ray of its own in a process of its own."""
    import yaml

    from serving.process import free_ports

    (config,) = local_backend(cfg, "pytorch").deploy_files({}).values()
    (work / "serve_config.yaml").write_text(config)
    port, grpc_port = free_ports(2, "127.0.0.1")
    port_file = work / "ray_serve_port"
    log = open(work / "ray_serve_outside.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-c", RAY_SERVE_LAUNCHER, str(work / "serve_config.yaml"),
                                str(port_file), str(port), str(grpc_port)], stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    try:
        url = f"http://127.0.0.1:{port}/{cfg.model.name}"
        deadline = time.monotonic() + 300
        while not port_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray Serve app did not start: see {work / 'ray_serve_outside.log'}")
            time.sleep(0.5)
        wait_ready(url)
        (app,) = yaml.safe_load(config)["applications"]
        yield [f"backends.endpoint.url={url}", f"backends.endpoint.grpc_url=127.0.0.1:{grpc_port}",
               f"+backends.endpoint.grpc_metadata.application={app['name']}"]
    finally:
        stop(process, log, 60)


OUTSIDE = {"fastapi": lambda cfg, work, launched_id: fastapi_outside(cfg, work),
           "triton": triton_outside,
           "torchserve": lambda cfg, work, launched_id: torchserve_outside(cfg, work),
           "ray_serve": lambda cfg, work, launched_id: ray_serve_outside(cfg, work)}


def _median(runs: list[dict], key: tuple[str, int, int], metric: str) -> float:
    return statistics.median(run[key][metric] for run in runs)


def compare(server: str, launched_runs: list[dict], endpoint_runs: list[dict], again: dict) -> list[dict[str, Any]]:
    """One row per point measured both ways in every round: the medians' ratios (one round: the figures'), each
    round's ratios, the launched runs' spread and, with a second launched run (`again`), the machine's own spread."""
    rows = []
    common = set.intersection(*(set(run) for run in (*launched_runs, *endpoint_runs)))
    for key in sorted(common):
        protocol, batch, concurrency = key
        a = {m: _median(launched_runs, key, m) for m in ("p50_ms", "img_s")}
        b = {m: _median(endpoint_runs, key, m) for m in ("p50_ms", "img_s")}
        p50_ratio, img_s_ratio = b["p50_ms"] / a["p50_ms"], b["img_s"] / a["img_s"]
        engines = {run[key]["engine"] for run in (*launched_runs, *endpoint_runs)}
        row = {"server": server, "protocol": protocol, "batch": batch, "concurrency": concurrency,
               "launched_p50_ms": a["p50_ms"], "endpoint_p50_ms": b["p50_ms"], "p50_ratio": p50_ratio,
               "launched_img_s": a["img_s"], "endpoint_img_s": b["img_s"], "img_s_ratio": img_s_ratio,
               "engine": "/".join(sorted(engines)),
               "within_goal": abs(p50_ratio - 1) <= GOAL and abs(img_s_ratio - 1) <= GOAL}
        if len(launched_runs) > 1:
            row["round_img_s_ratios"] = " ".join(f"{e[key]['img_s'] / la[key]['img_s']:.2f}"
                                                 for la, e in zip(launched_runs, endpoint_runs, strict=True))
            img_s = [run[key]["img_s"] for run in launched_runs]
            row["launched_img_s_spread"] = max(img_s) / min(img_s)
        if key in again:  # the same server launched again: the spread the endpoint's is set beside
            c = again[key]
            row.update(again_p50_ratio=c["p50_ms"] / a["p50_ms"], again_img_s_ratio=c["img_s"] / a["img_s"])
            row["within_noise"] = all(abs(row[f"{m}_ratio"] - 1) <= max(GOAL, abs(row[f"again_{m}_ratio"] - 1))
                                      for m in ("p50", "img_s"))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    parser.add_argument("--name", default="endpoint_agreement")
    parser.add_argument("--keep", action="store_true", help="keep the sweeps' logs, runs and MLflow store")
    parser.add_argument("--noise", action="store_true", help="launch each server twice: its run-to-run spread")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate launched and endpoint runs this many times and compare their medians")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds}: give 1 or more")

    from experiments.config.compose import load_config

    common = [f"model={args.model}", "gpu=local", f"experiment.window_s={args.window_s}",
              f"experiment.batch_sizes=[{','.join(map(str, args.batches))}]",
              f"experiment.concurrency=[{','.join(map(str, args.concurrency))}]", "experiment.matrix=full",
              "experiment.input_formats=[tensor]", "experiment.warmup_requests=10"]
    cfg = load_config(common)
    work = Path(tempfile.mkdtemp(prefix="tierbench-endpoint-agreement-"))
    rows = []
    try:
        for server in args.servers:
            variant, protocols = SERVERS[server]
            chosen = f"experiment.protocols=[{','.join(protocols)}]"
            launched_runs: list[dict] = []
            endpoint_runs: list[dict] = []
            for round_ in range(args.rounds):
                tag = f"-r{round_ + 1}" if args.rounds > 1 else ""
                launched_id = f"{server}-launched{tag}"
                print(f"{server}{tag}: launched ...", flush=True)
                launched_runs.append(sweep(work, launched_id, [*common, chosen, f"experiment.backends=[{variant}]"]))
                with OUTSIDE[server](cfg, work, launched_id) as endpoint:
                    print(f"{server}{tag}: as an endpoint ...", flush=True)
                    endpoint_runs.append(sweep(work, f"{server}-endpoint{tag}",
                                               [*common, chosen, "experiment=endpoint", *endpoint]))
            again = (sweep(work, f"{server}-launched-again", [*common, chosen, f"experiment.backends=[{variant}]"])
                     if args.noise else {})
            rows.extend(compare(server, launched_runs, endpoint_runs, again))
    finally:
        if args.keep:
            print(f"logs and runs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    noise = ["again_p50_ratio", "again_img_s_ratio", "within_noise"] if args.noise else []
    if args.rounds > 1:
        noise += ["round_img_s_ratios", "launched_img_s_spread"]
    report(args.name, ["server", "protocol", "batch", "concurrency", "launched_p50_ms", "endpoint_p50_ms",
                       "p50_ratio", "launched_img_s", "endpoint_img_s", "img_s_ratio", "engine", "within_goal", *noise],
           rows, {"model": args.model, "window_s": args.window_s, "goal": GOAL, "rounds": args.rounds,
                  "within_goal": sum(r["within_goal"] for r in rows), "points": len(rows),
                  **({"within_noise": sum(r.get("within_noise", False) for r in rows)} if args.noise else {})})


if __name__ == "__main__":
    main()
