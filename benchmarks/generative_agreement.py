"""tierbench's generative figures against an independent tool's on the same server in the same run: NVIDIA's AIPerf
(`aiperf profile`, streaming chat, closed loop at the same concurrency, the same prompt and answer lengths), run right
after each tierbench trial. Goal: TTFT p50 and p99, ITL p50 and output tokens/s within 10 %.

    python benchmarks/generative_agreement.py [--servers standin transformers] [--aiperf /tmp/aiperf-venv/bin/aiperf]

Servers: the stand-in (TTFT 40 ms, ITL 8 ms; 128-token prompts, 64-token answers) at 1, 8 and 64 streams, and
`transformers serve` with the tiny random-weight Llama on the CPU (64-token prompts, 32-token answers) at 1 and 4.
Like is compared with like (docs/benchmarks.md, "Generative streams"): tierbench's ITL (every gap between events
carrying output) with AIPerf's inter_chunk_latency, tierbench's TPOT ((e2e - TTFT) / (tokens - 1) per request) with
AIPerf's inter_token_latency, and both tools count tokens alike: the stand-in's " tok" is one token of the word-level
tokenizer both are given (the stand-in counts with it too), and the tiny Llama's tokenizer is the one it serves.
AIPerf runs offline and finds a tokenizer only in a Hugging Face cache, so each is copied into a private HF_HOME.

AIPerf runs twice after each tierbench trial: `closed`, its default closed loop (`--concurrency` alone), and `paced`,
the same cap with `--request-rate 1000 --arrival-pattern constant`: in 0.13.0 the default loop's timing manager
polls for a free slot without sleeping, a busy core, which on two cores slows a CPU-bound server and AIPerf's own
client; paced, it sleeps between tries (a freed slot waits about 1 ms). Each row gives the timing manager's cores
(its CPU seconds over the run's duration). Each AIPerf run lasts as long as the tierbench trial measured (its
`measured_s`, at least 5 s) after a warm-up of max(8, 2 x concurrency) requests. Before the first trial the script
waits for a 1-minute load average below `--max-load`, and before each later trial (up to `--trial-wait-s`) for the
machine's other work to fall below half a core; each row records both. Prints a table and writes
benchmarks/results/generative_agreement.json (AIPerf's own exports are not kept).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from benchmarks.generative_standin import (  # noqa: E402
    hf_cache_entry,
    lateness,
    settle,
    tierbench_figures,
    tierbench_trial,
    word_tokenizer,
)

GOAL = 0.10
AIPERF = "/tmp/aiperf-venv/bin/aiperf"
# What AIPerf's profile_export_aiperf.json holds that the rows take: its tag, then the statistics taken.
AIPERF_FIGURES = {"time_to_first_token": ("p50", "p99", "avg"), "inter_chunk_latency": ("p50", "p99"),
                  "inter_token_latency": ("p50", "p99"), "output_token_throughput": ("avg",),
                  "request_count": ("avg",), "output_sequence_length": ("avg", "min"),
                  "usage_completion_tokens": ("avg",), "effective_concurrency": ("avg",),
                  "credit_to_start_latency": ("p50", "p99"), "http_req_sending": ("p50",),
                  "http_req_waiting": ("p50", "p99"),
                  "request_latency": ("p50",), "benchmark_duration": ("avg",)}
# (row key, tierbench figure, AIPerf figure): the pairs compared, tierbench / AIPerf
PAIRS = (("ttft_p50", "ttft_p50_ms", "time_to_first_token_p50"), ("ttft_p99", "ttft_p99_ms", "time_to_first_token_p99"),
         ("itl_p50", "itl_p50_ms", "inter_chunk_latency_p50"), ("tpot_p50", "tpot_p50_ms", "inter_token_latency_p50"),
         ("tokens_s", "output_tokens_s", "output_token_throughput_avg"))
GOAL_PAIRS = ("ttft_p50", "ttft_p99", "itl_p50", "tokens_s")


# AIPerf's two ways of keeping `concurrency` requests in flight. closed: --concurrency alone, its default; in 0.13.0
# its timing manager then polls for a free slot without sleeping (RequestRateStrategy.execute_phase yields to its
# event loop and loops), a core busy for the whole run. paced: the same cap with --request-rate 1000 (constant), so
# the loop sleeps on a timer between tries and a freed slot is filled within about 1 ms.
AIPERF_MODES = {"closed": (), "paced": ("--request-rate", "1000", "--arrival-pattern", "constant")}


class CpuSeries:
    """Every `interval_s` while it runs: the time, the machine's busy CPU seconds and the CPU seconds of each process
    of the watched process groups (`watch`: the server's, each AIPerf run's), from /proc. `cores` gives the cores used
    between two times; AIPerf names its services' processes, which `services` sums by."""

    def __init__(self, interval_s: float = 0.5) -> None:
        import threading

        self.interval_s, self.watch = interval_s, set()
        self.samples: list[tuple[float, float, dict[int, tuple[int, float]]]] = []
        self.names: dict[int, str] = {}
        self.tick = os.sysconf("SC_CLK_TCK")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from serving.node import cpu_times

        while not self.stop.wait(self.interval_s):
            procs = {}
            for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[2]) not in self.watch:
                        continue
                    # a service names itself once started; an exiting process's cmdline is empty: keep the name
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    service = re.match(r"aiperf ([a-z_]+?)(?:_[0-9a-f]{8})?\s*$", command)
                    if service:
                        self.names[pid] = service.group(1)
                except (OSError, IndexError, ValueError):
                    continue
                procs[pid] = (int(fields[2]), (int(fields[11]) + int(fields[12])) / self.tick)
            busy = cpu_times()
            self.samples.append((time.time(), busy[0] / self.tick if busy else 0.0, procs))

    def _span(self, start: float, end: float) -> tuple[tuple, tuple, float] | None:
        inside = [sample for sample in self.samples if start <= sample[0] <= end]
        if len(inside) < 2:
            return None
        return inside[0], inside[-1], inside[-1][0] - inside[0][0]

    def cores(self, start: float, end: float, pgid: int | None = None) -> float | None:
        """Cores busy between `start` and `end` (epoch s): the machine's, or process group `pgid`'s."""
        span = self._span(start, end)
        if span is None:
            return None
        first, last, seconds = span
        if pgid is None:
            return round((last[1] - first[1]) / seconds, 2)
        used = sum(cpu - first[2].get(pid, (0, 0.0))[1] for pid, (group, cpu) in last[2].items() if group == pgid)
        return round(used / seconds, 2)

    def services(self, start: float, end: float, pgid: int) -> dict[str, float]:
        """Cores each named process of group `pgid` used between `start` and `end`."""
        span = self._span(start, end)
        if span is None:
            return {}
        first, last, seconds = span
        out: dict[str, float] = {}
        for pid, (group, cpu) in last[2].items():
            if group == pgid:
                name = self.names.get(pid, "other")
                out[name] = round(out.get(name, 0.0) + (cpu - first[2].get(pid, (0, 0.0))[1]) / seconds, 2)
        return out

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def aiperf_run(aiperf: str, out: Path, hf_home: Path, url: str, model: str, tokenizer: str, concurrency: int,
               input_tokens: int, output_tokens: int, duration_s: float, mode: str, cpu: CpuSeries,
               server_pgid: int) -> dict:
    """One `aiperf profile` (its own process group, stopped whatever happens): the figures of AIPERF_FIGURES, and the
    cores its processes, the server and the machine used over its profiling phase."""
    from datetime import datetime

    from serving.process import start_process, stop_process_group, tail

    warmup = max(8, 2 * concurrency)
    cmd = [aiperf, "profile", "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", tokenizer, "--concurrency", str(concurrency), "--benchmark-duration", f"{duration_s:.1f}",
           "--warmup-request-count", str(warmup), "--prompt-input-tokens-mean", str(input_tokens),
           "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(output_tokens),
           "--prompt-output-tokens-stddev", "0", "--random-seed", "0", "--output-artifact-dir", str(out),
           "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", *AIPERF_MODES[mode]]
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = out.parent / f"{out.name}.log"
    started = time.monotonic()
    process = start_process(cmd, log, env)
    cpu.watch.add(process.pid)
    try:
        code = process.wait(timeout=duration_s + 300)
    finally:
        stop_process_group(process, 10)
    export = out / "profile_export_aiperf.json"
    if code != 0 or not export.exists():
        raise RuntimeError(f"aiperf exited {code}; its log ends:\n{tail(log)}")
    data = json.loads(export.read_text())
    figures: dict[str, Any] = {"mode": mode}
    for tag, stats in AIPERF_FIGURES.items():
        for stat in stats:
            figures[f"{tag}_{stat}"] = (data.get(tag) or {}).get(stat)
    # its profiling phase (local times), over which the cores are read
    start, end = (datetime.fromisoformat(data[key]).timestamp() for key in ("start_time", "end_time"))
    services = cpu.services(start, end, process.pid)
    figures.update(warmup_requests=warmup, wall_s=round(time.monotonic() - started, 1), services_cores=services,
                   own_cores=round(sum(services.values()), 2), timing_manager_cores=services.get("timing_manager"),
                   server_cores=cpu.cores(start, end, server_pgid), machine_cores=cpu.cores(start, end))
    return figures


def pair_row(server: str, concurrency: int, tb: dict, ap: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"server": server, "concurrency": concurrency, "aiperf": ap["mode"]}
    misses = []
    for key, tb_key, ap_key in PAIRS:
        a, b = tb.get(tb_key), ap.get(ap_key)
        ratio = a / b if a is not None and b else None  # AIPerf's ICL p50 reads 0 when its reads bunch events
        row[key] = f"{a:.3g} / {b:.3g}" if a is not None and b is not None else f"{a} / {b}"
        row[f"{key}_x"] = ratio
        if key in GOAL_PAIRS and (ratio is None or abs(ratio - 1) > GOAL):
            misses.append(key)
    in_flight = ap.get("effective_concurrency_avg")
    row["aiperf_in_flight"] = in_flight / concurrency if in_flight else None
    row["server_cores"] = f"{tb.get('server_cores')} / {ap.get('server_cores')}"
    row["aiperf_cores"] = f"{ap.get('own_cores')} ({ap.get('timing_manager_cores')})"
    row["requests"] = f"{tb.get('completed_requests'):.0f} / {ap.get('request_count_avg') or 0:.0f}"
    row["met"] = "yes" if not misses else "no: " + ", ".join(misses)
    row.update({f"tierbench_{k}": v for k, v in tb.items()})
    row.update({f"aiperf_{k}": v for k, v in ap.items() if k != "mode"})
    return row


COLUMNS = ["server", "concurrency", "aiperf", "load", "ttft_p50", "ttft_p50_x", "ttft_p99", "ttft_p99_x", "itl_p50",
           "itl_p50_x", "tpot_p50", "tpot_p50_x", "tokens_s", "tokens_s_x", "aiperf_in_flight", "server_cores",
           "aiperf_cores", "requests", "met"]


def measure_pairs(args: argparse.Namespace, work: Path, hf_home: Path, server: str, url: str, model: str,
                  tokenizer_dir: Path, tokenizer_repo: str, concurrency: int, input_tokens: int, output_tokens: int,
                  window_s: float, first: bool, cpu: CpuSeries, server_pgid: int,
                  standin: Any = None) -> list[dict[str, Any]]:
    """tierbench, then AIPerf in each of `args.aiperf_modes`, at one concurrency: a row per AIPerf run."""
    seen = settle(args.max_load if first else None, args.wait_s if first else args.trial_wait_s,
                  f"{server} c{concurrency}")
    if standin is not None:
        standin.reset_stats()
    record = tierbench_trial(work, f"{server}-c{concurrency}", url, model, tokenizer_dir, concurrency, input_tokens,
                             output_tokens, window_s)
    tb = tierbench_figures(record)
    window = record["window"]
    tb.update(server_cores=cpu.cores(window["start"], window["end"], server_pgid),
              machine_cores=cpu.cores(window["start"], window["end"]))
    if standin is not None:
        tb.update(lateness(standin.stats()))
    loads = [round(os.getloadavg()[0], 2)]
    duration = max(5.0, float(tb["measured_s"] or 0))
    rows = []
    for mode in args.aiperf_modes:
        if standin is not None:
            standin.reset_stats()
        ap = aiperf_run(args.aiperf, work / f"aiperf-{server}-c{concurrency}-{mode}", hf_home, url, model,
                        tokenizer_repo, concurrency, input_tokens, output_tokens, duration, mode, cpu, server_pgid)
        if standin is not None:
            ap.update(lateness(standin.stats()))
        row = pair_row(server, concurrency, tb, ap)
        loads.append(round(os.getloadavg()[0], 2))
        row.update(seen, load_1m_after_tierbench=loads[0], load_1m_after_aiperf=loads[-1])
        row["load"] = f"{seen['load_1m_before']:.2f} / {loads[0]:.2f} / {loads[-1]:.2f}"
        print(f"{server} c{concurrency} AIPerf {mode}: {row['met']}", flush=True)
        rows.append(row)
    return rows


def measure_servers(args: argparse.Namespace, work: Path, cpu: CpuSeries) -> list[dict[str, Any]]:
    """Every server of `args.servers` at each of its concurrencies: the rows."""
    rows: list[dict[str, Any]] = []
    hf_home = work / "hf"
    if "standin" in args.servers:
        from serving.workloads.generative.standin import StandIn

        words = word_tokenizer(work / "words")
        repo = hf_cache_entry(words, hf_home, "tierbench/words")
        with StandIn(ttft_ms=40.0, itl_ms=8.0, model="standin", tokenizer=str(words),
                     log_path=work / "standin.log") as standin:
            cpu.watch.add(standin.process.pid)
            for c in args.standin_concurrency:
                rows += measure_pairs(args, work, hf_home, "standin", standin.url, standin.model, words, repo, c,
                                      128, 64, args.window_s, not rows, cpu, standin.process.pid, standin)
    if "transformers" in args.servers:
        from serving.workloads.generative.tiny_model import write_tiny_llama
        from tests.generative_servers import TransformersServe

        model_dir = write_tiny_llama(work / "tiny-llama")
        repo = hf_cache_entry(model_dir, hf_home, "tierbench/tiny-llama")
        with TransformersServe(model_dir, log_path=work / "transformers-serve.log") as serve:
            cpu.watch.add(serve.process.pid)
            for c in args.transformers_concurrency:
                # 5 s windows: some 25 answers each at its ~5 answers a second
                rows += measure_pairs(args, work, hf_home, "transformers", serve.url, serve.model, model_dir, repo,
                                      c, 64, 32, max(args.window_s, 5.0), not rows, cpu, serve.process.pid)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    servers = ("standin", "transformers")
    parser.add_argument("--servers", nargs="+", choices=servers, default=list(servers))
    parser.add_argument("--standin-concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--transformers-concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--aiperf", default=AIPERF, help="the aiperf command (its own venv)")
    parser.add_argument("--aiperf-modes", nargs="+", choices=list(AIPERF_MODES), default=list(AIPERF_MODES))
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for a 1-minute load average below it")
    parser.add_argument("--wait-s", type=float, default=900.0, help="before the first pair, wait at most this long")
    parser.add_argument("--trial-wait-s", type=float, default=60.0, help="before each later one, at most this long")
    parser.add_argument("--name", default="generative_agreement")
    args = parser.parse_args()
    if not Path(args.aiperf).exists():
        sys.exit(f"no aiperf at {args.aiperf}: install it in a venv of its own (pip install aiperf) and give --aiperf")

    started = time.time()
    cpu = CpuSeries()
    try:
        with tempfile.TemporaryDirectory(prefix="tierbench-gen-agreement-") as tmp:
            rows = measure_servers(args, Path(tmp), cpu)
    finally:
        cpu.close()
    report(args.name, COLUMNS, rows, {
        "goal": f"TTFT p50 and p99, ITL p50 and output tokens/s within {GOAL:.0%} of AIPerf's (tierbench / AIPerf)",
        "pairs": {key: {"tierbench": a, "aiperf": b} for key, a, b in PAIRS},
        "aiperf_modes": {mode: " ".join(flags) or "--concurrency alone" for mode, flags in AIPERF_MODES.items()},
        "load": "load_1m_before: the 1-minute load average before tierbench's trial (nothing of ours running); "
                "load_1m_after_tierbench: after it; load_1m_after_aiperf: after the row's AIPerf run",
        "cores": "server_cores: the server's process group over tierbench's windows / over AIPerf's profiling phase; "
                 "aiperf_cores: AIPerf's processes over its profiling phase (its timing manager's); *_machine_cores: "
                 "the whole machine's busy cores over the same spans",
        "runtime_s": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
