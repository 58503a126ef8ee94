"""The generative measurement against a server whose figures are known: the stand-in
(`serving/workloads/generative/standin.py`) writing its first token 40 ms after a request and every next one 8 ms
later, measured by the real sweep (`experiment=generative`) at 1, 8 and 64 streams in a closed loop. Goal: p50 TTFT
and ITL within 5 % of the set values, p99 within 10 %. Beside each trial, the stand-in's own lateness (its
`GET /stats`: each chunk's write time minus its schedule) and the client's event-loop lag, so that a miss can be put
on the server or on the client.

    python benchmarks/generative_standin.py [--concurrency 1 8 64] [--ttft-ms 40] [--itl-ms 8] [--max-load 1.5]

One sweep per concurrency (each starts its own local Ray, as `python -m runners.sweep` does), the stand-in's
statistics reset before each, so its lateness covers that trial (warm-up and windows). Prompts of 128 tokens asking
for 64, counted with a word-level tokenizer in which the stand-in's token text (" tok") is one token
(`word_tokenizer`; the stand-in counts prompts with it too). Before the first trial the script waits (up to
`--wait-s`) for the 1-minute load average to fall below `--max-load`, and before each later trial (up to
`--trial-wait-s`) for the other work on the machine to fall below half a core; each row records both. Prints a
table and writes benchmarks/results/generative_standin.json.

Shared with benchmarks/generative_agreement.py: the tokenizer, the quiet-machine wait, the sweep of one trial.
"""

from __future__ import annotations

import argparse
import os
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

GOAL_P50, GOAL_P99 = 0.05, 0.10  # how far (share of the set value) the p50s and the p99s may be
NOT_SERVER = "not the server's writes"
QUIET_CORES = 0.5  # other work on the machine before a trial: at most this many busy cores
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
AIPERF_CORPUS = Path("/tmp/aiperf-venv/lib/python3.11/site-packages/aiperf/dataset/generator/assets/shakespeare.txt")


# --- the machine ----------------------------------------------------------------------------------------------------

def settle(max_load: float | None, wait_s: float, what: str) -> dict[str, float]:
    """Wait (at most `wait_s`) until the 1-minute load average is below `max_load` (None: not asked) and the machine's
    other work takes less than QUIET_CORES (a 3 s sample while nothing of ours runs); returns what was seen."""
    from serving.node import busy_cores

    start = time.monotonic()
    while True:
        load, busy = os.getloadavg()[0], busy_cores(3.0) or 0.0
        quiet = busy < QUIET_CORES and (max_load is None or load < max_load)
        waited = time.monotonic() - start
        if quiet or waited >= wait_s:
            if not quiet:
                print(f"{what}: not quiet after {waited:.0f} s (load {load:.2f}, {busy:.2f} cores busy): measuring "
                      "anyway", flush=True)
            return {"load_1m_before": round(load, 2), "busy_cores_before": round(busy, 2),
                    "waited_s": round(waited, 1), "quiet": quiet}
        time.sleep(10.0)


# --- tokenizers -----------------------------------------------------------------------------------------------------

def word_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer (lowercased; words and runs of punctuation are tokens) whose vocabulary holds the words of
    tierbench's synthetic prompts, of AIPerf's prompt corpus (where installed) and "tok", so the stand-in's answer
    " tok tok tok" is 3 tokens to the stand-in, tierbench and AIPerf alike; with a plain chat template."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from serving.workloads.generative.prompts import WORDS

    pre = pre_tokenizers.Whitespace()
    words = set(WORDS) | set(string.punctuation)
    if AIPERF_CORPUS.exists():
        words |= {word for word, _ in pre.pre_tokenize_str(AIPERF_CORPUS.read_text().lower())}
    vocab = {token: i for i, token in enumerate(["[UNK]", "<s>", "</s>", "tok", *sorted(words - {"tok"})])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", bos_token="<s>", eos_token="</s>",
                                   model_max_length=4096)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    assert len(fast.encode(" tok" * 5, add_special_tokens=False)) == 5, "the stand-in's token is not one token"
    return folder


def hf_cache_entry(tokenizer_dir: Path, hf_home: Path, repo_id: str) -> str:
    """Copy a tokenizer folder into a Hugging Face cache (`hf_home`/hub) as `repo_id`'s snapshot, which is where an
    offline AIPerf finds a tokenizer (it refuses a plain folder path); returns `repo_id`."""
    import hashlib

    files = sorted(p for p in tokenizer_dir.iterdir() if p.is_file() and not p.suffix == ".safetensors")
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in files)).hexdigest()
    entry = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = entry / "snapshots" / digest
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, snapshot / path.name)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(digest)
    return repo_id


# --- one tierbench trial --------------------------------------------------------------------------------------------

def tierbench_trial(work: Path, sweep_id: str, url: str, model: str, tokenizer: Path, concurrency: int,
                    input_tokens: int, output_tokens: int, window_s: float, extra: tuple[str, ...] = ()) -> dict:
    """One closed-loop trial of the real sweep (its own Ray and MLflow under `work`): the trial's record."""
    overrides = ["experiment=generative", "model=tiny_llama", f"model.name={model}", f"model.tokenizer={tokenizer}",
                 f"backends.openai.url={url}", f"experiment.concurrency=[{concurrency}]",
                 f"experiment.prompts.input_tokens.mean={input_tokens}",
                 f"experiment.prompts.output_tokens.mean={output_tokens}", f"experiment.window_s={window_s}",
                 "experiment.stability.windows=2", "experiment.stability.max_windows=3", *extra]
    code, records = run_sweep(work, sweep_id, overrides)
    if code != 0 or len(records) != 1 or records[0].get("status") not in (None, "ok"):
        log = (work / f"{sweep_id}.log").read_text()[-3000:]
        raise RuntimeError(f"sweep {sweep_id} exited {code} with {len(records)} records; its log ends:\n{log}")
    return records[0]


def tierbench_figures(record: dict) -> dict[str, Any]:
    """The figures the benchmarks compare, from a trial's record."""
    m, p = record["metrics"], record["params"]
    keys = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "latency_p50_ms",
            "output_tokens_s", "output_tokens_mean", "tokens_per_event_mean", "completed_requests", "measured_s",
            "windows", "stable", "client_loop_lag_p99_ms_max", "client_cpu_util_max", "endpoint_rtt_p50_ms")
    return {**{k: m.get(k) for k in keys}, "tokens_counted_by": p.get("tokens_counted_by"),
            "pin_output": p.get("endpoint_pin_output"), "load_engine": p.get("load_engine")}


def lateness(stats: dict) -> dict[str, Any]:
    """The stand-in's own lateness (ms) from its /stats."""
    late = stats["lateness_ms"]
    return {"server_chunks": stats["chunks"], "server_late_p50_ms": late["p50"], "server_late_p99_ms": late["p99"],
            "server_late_max_ms": late["max"]}


# --- the stand-in goal ----------------------------------------------------------------------------------------------

def standin_row(figures: dict, late: dict, concurrency: int, ttft_ms: float, itl_ms: float,
                output_tokens: int) -> dict[str, Any]:
    """The trial against the set values. A miss is put on the stand-in (`server`) when its own lateness covers the
    excess over the set value: for a p50, its median lateness; for TTFT's p99, its p99 lateness (a first chunk written
    that late); for ITL's p99, its p99 less its p50 (a chunk late by that much after one on time); a TTFT is allowed
    the network round trip besides (`endpoint_rtt_p50_ms`, measured before the trial: the stand-in's schedule counts
    from when it read the request). Otherwise on `not the server's writes`: the client, or the stand-in before it read
    the request (which its lateness, counted from then, does not see)."""
    figures_set = {"ttft_p50": ttft_ms, "ttft_p99": ttft_ms, "itl_p50": itl_ms, "itl_p99": itl_ms}
    late50, late99 = late["server_late_p50_ms"], late["server_late_p99_ms"]
    rtt = figures.get("endpoint_rtt_p50_ms") or 0.0
    covered = {"ttft_p50": late50 + rtt, "itl_p50": late50, "ttft_p99": late99 + rtt, "itl_p99": late99 - late50}
    ratios, misses = {}, []
    for name, value in figures_set.items():
        ratios[f"{name}_x"] = x = figures[f"{name}_ms"] / value
        if abs(x - 1) > (GOAL_P50 if "p50" in name else GOAL_P99):
            excess = figures[f"{name}_ms"] - value
            misses.append(f"{name} ({'server' if excess <= covered[name] else NOT_SERVER})")
    ideal = concurrency * output_tokens / ((ttft_ms + (output_tokens - 1) * itl_ms) / 1e3)
    return {"concurrency": concurrency, **figures, **ratios, "ideal_output_tokens_s": ideal,
            "output_tokens_x": figures["output_tokens_s"] / ideal, **late,
            "met": "yes" if not misses else "no: " + ", ".join(misses)}


COLUMNS = ["concurrency", "load", "ttft_p50_ms", "ttft_p50_x", "ttft_p99_ms", "ttft_p99_x", "itl_p50_ms", "itl_p50_x",
           "itl_p99_ms", "itl_p99_x", "tpot_p50_ms", "output_tokens_x", "server_late_p50_ms", "server_late_p99_ms",
           "client_loop_lag_p99_ms_max", "completed_requests", "met"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--ttft-ms", type=float, default=40.0)
    parser.add_argument("--itl-ms", type=float, default=8.0)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for a 1-minute load average below it")
    parser.add_argument("--wait-s", type=float, default=900.0, help="before the first trial, wait at most this long")
    parser.add_argument("--trial-wait-s", type=float, default=60.0, help="before each later one, at most this long")
    parser.add_argument("--name", default="generative_standin")
    args = parser.parse_args()

    from serving.workloads.generative.standin import StandIn

    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tierbench-gen-standin-") as tmp:
        work = Path(tmp)
        tokenizer = word_tokenizer(work / "words")
        with StandIn(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, model="standin", tokenizer=str(tokenizer),
                     log_path=work / "standin.log") as standin:
            for index, concurrency in enumerate(args.concurrency):
                seen = settle(args.max_load if index == 0 else None, args.wait_s if index == 0 else args.trial_wait_s,
                              f"c{concurrency}")
                standin.reset_stats()
                record = tierbench_trial(work, f"standin-c{concurrency}", standin.url, standin.model, tokenizer,
                                         concurrency, args.input_tokens, args.output_tokens, args.window_s)
                late = lateness(standin.stats())
                row = standin_row(tierbench_figures(record), late, concurrency, args.ttft_ms, args.itl_ms,
                                  args.output_tokens)
                row.update(seen, load_1m_after=round(os.getloadavg()[0], 2))
                row["load"] = f"{seen['load_1m_before']:.2f} / {row['load_1m_after']:.2f}"
                rows.append(row)
                print(f"c{concurrency}: {row['met']}", flush=True)
    report(args.name, COLUMNS, rows, {
        "goal": f"p50 TTFT and ITL within {GOAL_P50:.0%} of the set values, p99 within {GOAL_P99:.0%}",
        "set": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "input_tokens": args.input_tokens,
                "output_tokens": args.output_tokens, "window_s": args.window_s},
        "load": "load_1m_before: the 1-minute load average before the trial (nothing of ours running); "
                "load_1m_after: at its end (the sweep, its Ray and the stand-in included); busy_cores_before: the "
                "machine's busy cores over 3 s before the trial",
        "runtime_s": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
