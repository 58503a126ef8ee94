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

Each AIPerf run lasts as long as the tierbench trial measured (its `measured_s`, at least 5 s) after a warm-up of
max(8, 2 x concurrency) requests. Before the first trial the script waits for a 1-minute load average below
`--max-load`, and before each later pair (up to `--trial-wait-s`) for the machine's other work to fall below half a
core; each row records both.
Prints a table and writes benchmarks/results/generative_agreement.json (AIPerf's own exports are not kept).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def aiperf_run(aiperf: str, out: Path, hf_home: Path, url: str, model: str, tokenizer: str, concurrency: int,
               input_tokens: int, output_tokens: int, duration_s: float, extra: tuple[str, ...] = ()) -> dict:
    """One `aiperf profile` (its own process group, stopped whatever happens): the figures of AIPERF_FIGURES."""
    from serving.process import start_process, stop_process_group, tail

    warmup = max(8, 2 * concurrency)
    cmd = [aiperf, "profile", "--model", model, "--url", url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", tokenizer, "--concurrency", str(concurrency), "--benchmark-duration", f"{duration_s:.1f}",
           "--warmup-request-count", str(warmup), "--prompt-input-tokens-mean", str(input_tokens),
           "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(output_tokens),
           "--prompt-output-tokens-stddev", "0", "--random-seed", "0", "--output-artifact-dir", str(out),
           "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", *extra]
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = out.parent / f"{out.name}.log"
    cpu_before, wall_before = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    process = start_process(cmd, log, env)
    try:
        code = process.wait(timeout=duration_s + 300)
    finally:
        stop_process_group(process, 10)
    cpu_after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - wall_before
    export = out / "profile_export_aiperf.json"
    if code != 0 or not export.exists():
        raise RuntimeError(f"aiperf exited {code}; its log ends:\n{tail(log)}")
    data = json.loads(export.read_text())
    figures: dict[str, Any] = {}
    for tag, stats in AIPERF_FIGURES.items():
        for stat in stats:
            figures[f"{tag}_{stat}"] = (data.get(tag) or {}).get(stat)
    figures["warmup_requests"] = warmup
    # AIPerf's processes' CPU over the whole command (start-up, prompt generation and warm-up included)
    cpu_s = sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in ("ru_utime", "ru_stime"))
    figures.update(cpu_s=round(cpu_s, 1), wall_s=round(wall, 1))
    return figures


def pair_row(server: str, concurrency: int, tb: dict, ap: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"server": server, "concurrency": concurrency}
    misses = []
    for key, tb_key, ap_key in PAIRS:
        a, b = tb.get(tb_key), ap.get(ap_key)
        ratio = a / b if a is not None and b else None
        row[key] = f"{a:.3g} / {b:.3g}" if ratio is not None else f"{a} / {b}"
        row[f"{key}_x"] = ratio
        if key in GOAL_PAIRS and (ratio is None or abs(ratio - 1) > GOAL):
            misses.append(key)
    in_flight = ap.get("effective_concurrency_avg")
    row["aiperf_in_flight"] = in_flight / concurrency if in_flight else None
    row["requests"] = f"{tb.get('completed_requests'):.0f} / {ap.get('request_count_avg') or 0:.0f}"
    row["met"] = "yes" if not misses else "no: " + ", ".join(misses)
    row.update({f"tierbench_{k}": v for k, v in tb.items()})
    row.update({f"aiperf_{k}": v for k, v in ap.items()})
    return row


COLUMNS = ["server", "concurrency", "load", "ttft_p50", "ttft_p50_x", "ttft_p99", "ttft_p99_x", "itl_p50", "itl_p50_x",
           "tpot_p50", "tpot_p50_x", "tokens_s", "tokens_s_x", "aiperf_in_flight", "requests", "met"]


def measure_pair(args: argparse.Namespace, work: Path, hf_home: Path, server: str, url: str, model: str,
                 tokenizer_dir: Path, tokenizer_repo: str, concurrency: int, input_tokens: int, output_tokens: int,
                 first: bool, standin: Any = None, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """tierbench, then AIPerf, at one concurrency: one row."""
    seen = settle(args.max_load if first else None, args.wait_s if first else args.trial_wait_s,
                  f"{server} c{concurrency}")
    if standin is not None:
        standin.reset_stats()
    record = tierbench_trial(work, f"{server}-c{concurrency}", url, model, tokenizer_dir, concurrency, input_tokens,
                             output_tokens, args.window_s, extra)
    tb = tierbench_figures(record)
    if standin is not None:
        tb.update(lateness(standin.stats()))
        standin.reset_stats()
    load_between = round(os.getloadavg()[0], 2)
    duration = max(5.0, float(tb["measured_s"] or 0))
    ap = aiperf_run(args.aiperf, work / f"aiperf-{server}-c{concurrency}", hf_home, url, model, tokenizer_repo,
                    concurrency, input_tokens, output_tokens, duration)
    if standin is not None:
        ap.update(lateness(standin.stats()))
    row = pair_row(server, concurrency, tb, ap)
    row.update(seen, load_1m_between=load_between, load_1m_after=round(os.getloadavg()[0], 2))
    row["load"] = f"{seen['load_1m_before']:.2f} / {load_between:.2f} / {row['load_1m_after']:.2f}"
    print(f"{server} c{concurrency}: {row['met']}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    servers = ("standin", "transformers")
    parser.add_argument("--servers", nargs="+", choices=servers, default=list(servers))
    parser.add_argument("--standin-concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--transformers-concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--aiperf", default=AIPERF, help="the aiperf command (its own venv)")
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for a 1-minute load average below it")
    parser.add_argument("--wait-s", type=float, default=900.0, help="before the first pair, wait at most this long")
    parser.add_argument("--trial-wait-s", type=float, default=60.0, help="before each later one, at most this long")
    parser.add_argument("--name", default="generative_agreement")
    args = parser.parse_args()
    if not Path(args.aiperf).exists():
        sys.exit(f"no aiperf at {args.aiperf}: install it in a venv of its own (pip install aiperf) and give --aiperf")

    started = time.time()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tierbench-gen-agreement-") as tmp:
        work = Path(tmp)
        hf_home = work / "hf"
        if "standin" in args.servers:
            from serving.workloads.generative.standin import StandIn

            words = word_tokenizer(work / "words")
            repo = hf_cache_entry(words, hf_home, "tierbench/words")
            with StandIn(ttft_ms=40.0, itl_ms=8.0, model="standin", tokenizer=str(words),
                         log_path=work / "standin.log") as standin:
                for c in args.standin_concurrency:
                    rows.append(measure_pair(args, work, hf_home, "standin", standin.url, standin.model, words, repo,
                                             c, 128, 64, first=not rows, standin=standin))
        if "transformers" in args.servers:
            from serving.workloads.generative.tiny_model import write_tiny_llama
            from tests.generative_servers import TransformersServe

            model_dir = write_tiny_llama(work / "tiny-llama")
            repo = hf_cache_entry(model_dir, hf_home, "tierbench/tiny-llama")
            with TransformersServe(model_dir, log_path=work / "transformers-serve.log") as serve:
                for c in args.transformers_concurrency:
                    # ~1 answer a second: windows of 10 answers (not 20) keep the run to a few minutes
                    rows.append(measure_pair(args, work, hf_home, "transformers", serve.url, serve.model, model_dir,
                                             repo, c, 64, 32, first=not rows,
                                             extra=("experiment.stability.min_requests=10",)))
    report(args.name, COLUMNS, rows, {
        "goal": f"TTFT p50 and p99, ITL p50 and output tokens/s within {GOAL:.0%} of AIPerf's (tierbench / AIPerf)",
        "pairs": {key: {"tierbench": a, "aiperf": b} for key, a, b in PAIRS},
        "load": "load_1m_before: the 1-minute load average before tierbench's trial (nothing of ours running); "
                "_between: after it, before AIPerf; _after: after AIPerf",
        "runtime_s": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
