"""The launched generative stacks against their own engine, measured in one run: `experiment=generative_launched`
(transformers behind Ray Serve, both batchers, and Triton streaming tokens, on the tiny random-weight Llama) as a
real sweep, each trial's output tokens/s beside its engine's in-process throughput at the batch the server really
generated (the token ceiling), its share, and the verdict on what held it back. Goal on a CPU: each stack reaches
0.7 of in-process `generate` at the same batch, or its verdict says why with its numbers.

    python benchmarks/generative_stacks.py [--overrides 'experiment.concurrency=[1,8]' ...]
    python benchmarks/generative_stacks.py --sweep runs/<sweep_id>      # read a sweep already run

Prints a table and writes benchmarks/results/generative_stacks.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report, run_sweep  # noqa: E402

GOAL = 0.7
COLUMNS = ["stack", "concurrency", "served_tok_s", "ceiling_batch", "ceiling_tok_s", "share", "meets_goal",
           "server_batch_avg", "ttft_p50_ms", "tpot_p50_ms", "bottleneck", "evidence"]


def rows_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for record in records:
        m, t, tags = record["metrics"], record["trial"], record.get("tags", {})
        if record["status"] != "ok" or record.get("tags", {}).get("run_level", "trial") != "trial":
            continue
        share = m.get("ceiling_share")
        rows.append({"stack": f"{t['variant']}/{t['protocol']}/{t['input_format']}", "concurrency": t["concurrency"],
                     "served_tok_s": m.get("output_tokens_s"), "ceiling_batch": m.get("ceiling_batch"),
                     "ceiling_tok_s": m.get("ceiling_output_tokens_s"), "share": share,
                     "meets_goal": "" if share is None else ("yes" if share >= GOAL else "no: see verdict"),
                     "server_batch_avg": m.get("server_batch_avg", ""), "ttft_p50_ms": m.get("ttft_p50_ms"),
                     "tpot_p50_ms": m.get("tpot_p50_ms"), "bottleneck": tags.get("bottleneck", ""),
                     "evidence": tags.get("bottleneck_evidence", "")})
    return sorted(rows, key=lambda r: (r["stack"], r["concurrency"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", type=Path, help="a sweep's folder (runs/<sweep_id>) to read instead of running one")
    parser.add_argument("--overrides", nargs="*", default=[], help="more overrides of the sweep")
    args = parser.parse_args()
    if args.sweep:
        records = [json.loads(p.read_text()) for p in sorted(args.sweep.glob("*/trials/*/record.json"))]
        extra: dict[str, Any] = {"sweep": str(args.sweep)}
    else:
        work = Path(tempfile.mkdtemp(prefix="tierbench-generative-stacks-"))
        started = time.monotonic()
        code, records = run_sweep(work, "generative-stacks", ["experiment=generative_launched", *args.overrides])
        extra = {"overrides": args.overrides, "exit_code": code, "seconds": round(time.monotonic() - started, 1),
                 "log": str(work / "generative-stacks.log")}
        if code != 0:
            print(f"the sweep exited {code}: see {extra['log']}", file=sys.stderr)
    report("generative_stacks", COLUMNS, rows_of(records), {**extra, "goal_share": GOAL})


if __name__ == "__main__":
    main()
