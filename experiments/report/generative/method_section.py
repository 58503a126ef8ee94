"""A generative sweep's "How these numbers were made": what TTFT, ITL, TPOT and end-to-end latency time, how tokens
are counted and priced, what the marks mean, which load engine sent the requests, what the prompts were, where the
raw samples are, and each endpoint measured. The image report's lines on images, their corpus and the cross-check of
logits have no place here."""

from __future__ import annotations

import pandas as pd

from experiments.report import marks
from experiments.report.data import SweepData, nodes
from experiments.report.method_section import endpoint_lines
from experiments.report.render import Document


def _values(ok: pd.DataFrame, column: str) -> str:
    """`usage (4 trials), tokenizer (1 trial)`: a param's values over the trials; '' where none has it."""
    if column not in ok or ok[column].isna().all():
        return ""
    found = ok[column].dropna().astype(str).value_counts()
    return ", ".join(f"{value} ({n} trial{'s' if n > 1 else ''})" for value, n in found.items())


def prompts_line(ok: pd.DataFrame) -> list[str]:
    """What the requests asked: the prompt set, the tokens given and asked for, and whether the length was pinned."""
    parts = [f"{label}: {text}" for label, column in (("set", "prompts"), ("input tokens asked", "input_tokens"),
                                                      ("output tokens asked", "output_tokens"),
                                                      ("output length pinned by", "endpoint_pin_output"))
             if (text := _values(ok, column))]
    return [f"Prompts: {'; '.join(parts)}. An answer shorter than asked (`output_short_share`) means the server let "
            "the model stop early: the output length is then the model's, and so is the cost per request."
            ] if parts else []


def method_section(doc: Document, data: SweepData) -> None:
    doc.h(1, "How these numbers were made")
    ok = data.ok
    t = data.trials.iloc[0]
    settings = ", ".join(f"{k} = {t[k]}" for k in ("model", "window_s", "warmup_requests", "client_actors")
                         if k in t and pd.notna(t[k]))
    engines = _values(ok, "load_engine") or "python"
    counted = _values(ok, "tokens_counted_by")
    doc.bullets([
        "Latency, client-side, one sample per request answered well inside the windows, from the time it was due to "
        "be sent (its send time in a closed loop, its scheduled arrival in an open one); warm-up requests dropped; "
        "percentiles from the raw samples of every client actor merged (never averaged). TTFT: to its first output "
        "token (streamed answers only: an answer not streamed has no first token to time); ITL: every gap between two "
        "consecutive events that carried output; TPOT: (end to end − TTFT) / (output tokens − 1), the pace of the "
        "answer after its first token; end to end: the whole answer.",
        "Throughput: the output tokens of the requests *completed* inside the common measurement windows / their "
        "length (output tok/s), the prompt tokens of the same requests (input tok/s) and both (total tok/s); req/s: "
        "those requests per second. Tokens are counted by the server's `usage` where it reports one, else by the "
        "model's tokenizer over the answer's text, else one per streamed event that carried output (a lower bound "
        "where events hold several)" + (f": here {counted}." if counted else "."),
        f"Overloaded ({marks.OVERLOADED}): an open loop whose backlog (arrivals − completions) grew across the "
        f"windows: listed apart, never in a cost figure or the answer. Unstable ({marks.UNSTABLE}): a trial whose "
        "windows never agreed within the stability rule (on output tokens/s): marked wherever it appears; the answer "
        "takes a stable trial wherever one qualifies.",
        f"Load engine: {engines}. Streamed answers are read token by token by the Python client; the compiled engine "
        "records one completion per request and no token.",
        "Cost: price per hour / 3600 / output tokens per second × 1M per 1M output tokens; per 1M tokens divides by "
        "prompt + output tokens per second instead. It assumes the tier is kept as busy as in the trial."
        + (" A trial served by several nodes (an endpoint's replicas behind its URL) is priced at their count × the "
           "price." if (pd.Series(nodes(ok)) > 1).any() else ""),
        "Each trial is an MLflow run named `tier/variant/protocol/format/b1/cC` (open loop: `.../b1/poisson-rR`) with "
        f"its raw per-request records attached; this sweep's runs carry the tag `sweep_id = {data.sweep_id}`."
        + (f" Measurement settings: {settings}." if settings else ""),
        *prompts_line(ok),
        *endpoint_lines(ok),
    ])
