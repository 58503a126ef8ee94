"""The compiled load tools the project's client is compared with, each run as a subprocess on loopback:
perf_analyzer (C++, Triton's; from the tritonclient wheel) and wrk (C, Debian's `wrk` package, for Ray Serve's
HTTP ingress), and the loopback stub that answers instantly (benchmarks/loopback_stub.py)."""

from __future__ import annotations

import csv
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from serving.paths import cache_root

STUB = Path(__file__).with_name("loopback_stub.py")


def _at_niceness(cmd: list[str], niceness: int | None) -> list[str]:
    """`cmd` run at `niceness` (the trial's `client_niceness`: the reference tool gets the scheduling priority the
    engine it is compared with had), or at this process's own when None."""
    if niceness is None:
        return cmd
    return ["nice", "-n", str(niceness - os.nice(0)), *cmd]


def perf_analyzer_env() -> tuple[str, dict[str, str]]:
    binary = shutil.which("perf_analyzer") or str(Path(sys.executable).parent / "perf_analyzer")
    if not Path(binary).exists():
        raise SystemExit("perf_analyzer not found: it comes with `pip install tritonclient[all]==2.51.0`")
    import pytriton

    libs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    # One folder of links per environment, made again each time (a wheel upgrade renames the libraries), never
    # left behind per call
    links = cache_root() / "perf_analyzer-libs" / hashlib.sha256(str(libs).encode()).hexdigest()[:12]
    links.mkdir(parents=True, exist_ok=True)
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        link = links / name
        staging = links / f".{name}.{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(next(libs.glob(pattern)))
        staging.replace(link)  # atomic: a concurrent caller sees the old link or the new one
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{links}:{env.get('LD_LIBRARY_PATH', '')}"
    return binary, env


def run_perf_analyzer(binary: str, env: dict[str, str], model: str, url: str, protocol: str, concurrency: int,
                      window_s: float, niceness: int | None = None) -> dict[str, float]:
    """perf_analyzer at one concurrency; its stability threshold is relaxed (10 -> 20 -> 40 %) when a busy
    machine won't let it settle, and the threshold used is reported. `url`: host:port, with a path prefix for a
    server whose OIP routes sit under one (Ray Serve's route prefix). `protocol`: http | grpc, or a shared-memory
    protocol (`grpc_shm`: `-i grpc --shared-memory=system`). Also its own CPU (user + system, the kernel's
    accounting of the child, every attempt) and wall time, for its CPU per request."""
    from serving.protocols import parse_protocol

    wire, memory = parse_protocol(protocol)
    shared = [] if memory == "none" else [f"--shared-memory={memory}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    for stability in (10, 20, 40):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pa.csv"
            cmd = [binary, "-m", model, "-u", url, "-i", wire, "-b", "1", *shared,
                   f"--concurrency-range={concurrency}:{concurrency}",
                   f"--measurement-interval={int(window_s * 1000)}", f"--stability-percentage={stability}",
                   "--max-trials=10", "--input-data=random", "-f", str(out)]
            proc = subprocess.run(_at_niceness(cmd, niceness), env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode == 0:
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                (row,) = list(csv.DictReader(out.open()))
                return {"throughput": float(row["Inferences/Second"]), "p50_ms": float(row["p50 latency"]) / 1000,
                        "p99_ms": float(row["p99 latency"]) / 1000, "stability_pct": stability,
                        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                        "wall_s": time.monotonic() - started}
            if "stable" not in proc.stdout + proc.stderr:
                raise RuntimeError(f"perf_analyzer failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    raise RuntimeError(f"perf_analyzer found no stable measurement even at 40 %: {proc.stdout[-1000:]}")


def perf_analyzer_cpu_us(pa: dict[str, float], requests: float | None) -> tuple[float, str]:
    """perf_analyzer's own CPU per request over its whole run (start-up, model metadata, warm-up, every window):
    exact where the server counted the requests it sent (`requests`: Triton's inference count over the run), else
    its mean CPU use over its throughput (the windows' rate stands for the run's). With how it was had."""
    if requests:
        return pa["cpu_s"] / requests * 1e6, "server count"
    return pa["cpu_s"] / pa["wall_s"] / pa["throughput"] * 1e6, "cpu/s over infer/s"


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def split_http_request(request: bytes) -> tuple[str, bytes, dict[str, str]]:
    """A pre-built HTTP/1.1 request -> (path, body, headers other than Host and Content-Length), for wrk."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return path, body, {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}


def run_wrk(url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float,
            niceness: int | None = None) -> dict[str, float]:
    """wrk, one thread, `concurrency` keep-alive connections POSTing `body`: a 1 s warm-up, then the measured run;
    its requests/s and p50 (from `--latency`). Any non-2xx answer fails the row."""
    binary = shutil.which("wrk")
    if binary is None:
        raise SystemExit("wrk not found: `apt-get install wrk` (Debian), or leave out the Ray Serve rows")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "body.bin").write_bytes(body)
        lines = ['wrk.method = "POST"', *(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()),
                 f'local f = io.open("{tmp}/body.bin", "rb")', "wrk.body = f:read(\"*all\")", "f:close()"]
        script = Path(tmp) / "post.lua"
        script.write_text("\n".join(lines) + "\n")
        for duration in (1, seconds):
            proc = subprocess.run(_at_niceness([binary, "-t1", f"-c{concurrency}", f"-d{duration:g}s", "--latency",
                                                "-s", str(script), url], niceness),
                                  capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or "Non-2xx" in proc.stdout or "Socket errors" in proc.stdout:
        raise RuntimeError(f"wrk failed: {proc.stdout[-2000:]}{proc.stderr[-1000:]}")
    return {"throughput": float(re.search(r"Requests/sec:\s+([\d.]+)", proc.stdout).group(1)),
            "p50_ms": _wrk_ms(re.search(r"^\s+50%\s+(\S+)", proc.stdout, re.M).group(1)),
            "p99_ms": _wrk_ms(re.search(r"^\s+99%\s+(\S+)", proc.stdout, re.M).group(1))}


@contextmanager
def loopback_stub(http_port: int, grpc_port: int) -> Iterator[dict[str, str]]:
    """The instant server as a subprocess (stopped on exit, failure and Ctrl-C too); its client URLs."""
    proc = subprocess.Popen([sys.executable, str(STUB), "--http-port", str(http_port), "--grpc-port",
                             str(grpc_port)], stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the loopback stub did not start (exit {proc.poll()})")
        yield {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}", "pid": str(proc.pid)}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
