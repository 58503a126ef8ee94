"""The report's "How these numbers were made": how latency, throughput and cost are measured and counted, what the
marks mean, which load engine sent the requests, where the raw samples are, and what the cross-check found."""

from __future__ import annotations

import pandas as pd

from experiments.report import marks
from experiments.report.data import SweepData, nodes
from experiments.report.render import Document


def endpoint_lines(ok: pd.DataFrame) -> list[str]:
    """One line per endpoint measured (a server tierbench did not start): where it is, what it serves, where the
    clients ran and the network's round trip, which every latency of its trials includes."""
    if "endpoint_url" not in ok or ok["endpoint_url"].isna().all():
        return []
    lines = []
    for (tier, variant), rows in ok[ok["endpoint_url"].notna()].groupby(["tier", "variant"]):
        row = rows.iloc[0]
        rtt = rows["endpoint_rtt_p50_ms"].median() if "endpoint_rtt_p50_ms" in rows else float("nan")
        clients = sorted({h for hosts in rows["client_hostnames"].dropna() for h in str(hosts).split(",") if h})
        platform = f", {row['endpoint_platform']}" if pd.notna(row.get("endpoint_platform")) else ""
        where = ", ".join(clients) or "the sweep's node"
        lines.append(
            f"Endpoint `{variant}` on tier {tier}: a server tierbench did not start, at {row['endpoint_url']} (model "
            f"`{row.get('endpoint_model', '')}`{platform}). Its clients ran on {where}; the network's round trip to "
            f"it, timed before its trials (p50 of small requests), was {rtt:.2f} ms, and every latency of its trials "
            f"includes it. Nothing of its node{'s' if int(nodes(row)) > 1 else ''} is known: no GPU telemetry, no "
            "in-process ceiling, no server log; "
            f"{_endpoint_cost(row)}.")
    return lines


def _endpoint_cost(row: pd.Series) -> str:
    """How an endpoint's images are priced: for one node, or for the nodes behind its URL."""
    count, price = int(nodes(row)), row.get("price_per_hour_usd")
    if count == 1:
        return "its cost is the tier's price per hour, for one node"
    each = f"${float(price):g}/h" if price is not None and pd.notna(price) else "the tier's price per hour"
    return (f"{count} nodes behind the URL, priced at {count} × {each} (the tier's primary price; each of its other "
            f"listed prices × {count} too); a capacity plan takes one node's share as its throughput ÷ {count}")


def method_section(doc: Document, data: SweepData) -> None:
    doc.h(1, "How these numbers were made")
    t = data.trials.iloc[0]
    settings = ", ".join(f"{k} = {t[k]}" for k in ("model", "window_s", "warmup_requests", "client_actors")
                         if k in t and pd.notna(t[k]))
    engines = data.ok["load_engine"].fillna("python").value_counts() if "load_engine" in data.ok else pd.Series()
    engine_line = ("Load engine: " + ", ".join(f"{name} ({n} trials)" for name, n in engines.items()) + ". The "
                   "compiled engine (C: HTTP/1.1 written for it, gRPC over libnghttp2) sends each request's bytes as "
                   "the client's own code built them; the Python client is the project's asyncio client. "
                   + (f"Figures measured by the less used engine are marked {marks.OTHER_ENGINE}: set beside the "
                      "others, the difference may be the client's." if len(engines) > 1 else ""))
    crosscheck = crosscheck_lines(data.ok)
    endpoints = endpoint_lines(data.ok)
    inputs = inputs_lines(data.ok)
    doc.bullets([
        "Latency: client-side, from the time a request was due to be sent (its send time in a closed loop, its "
        "scheduled arrival in an open one, so time spent waiting to be sent counts, as a user would wait) to its "
        "response, "
        "one sample per request; warm-up requests "
        "are dropped; percentiles come from the raw samples of every client actor merged (never averaged).",
        "Throughput: images whose requests *completed* inside the common measurement windows / their length "
        "(as perf_analyzer and LoadGen count), closed and open loop alike; an open loop also logs its offered "
        "rate (arrivals scheduled) and achieved rate (requests sent). Triton's own count of inferred images over "
        "the same windows checks it (`server_count_ratio`).",
        f"Overloaded ({marks.OVERLOADED}): an open loop whose backlog (arrivals − completions) grew across the "
        "windows: listed apart, never in a cost figure or the answer. Unstable "
        f"({marks.UNSTABLE}): a trial whose windows never agreed within the stability rule: marked wherever it "
        "appears; the answer takes a stable trial wherever one qualifies.",
        engine_line.strip(),
        "Cost: price per hour / 3600 / throughput × 1000 per 1k images; images per $ is its inverse. It assumes "
        "the tier is kept as busy as in the trial." + (" A trial served by several nodes (an endpoint's replicas "
                                                        "behind its URL) is priced at their count × the price."
                                                        if (pd.Series(nodes(data.ok)) > 1).any() else ""),
        "Each trial is an MLflow run named `tier/variant/protocol/format/bB/cC` (open loop: `.../bB/poisson-rR`) "
        "with its raw latencies "
        f"(`latencies.csv`) attached; this sweep's runs carry the tag `sweep_id = {data.sweep_id}`."
        + (f" Measurement settings: {settings}." if settings else ""),
        *inputs,
        *crosscheck,
        *endpoints,
    ])


def inputs_lines(ok: pd.DataFrame) -> list[str]:
    """What the requests carried (docs/inputs.md): the corpus, and per input format the images' payload as the
    trials logged it (the corpus's own sizes, for the files)."""
    if "payload_image_bytes_p50" not in ok or ok["payload_image_bytes_p50"].isna().all():
        return []
    corpus = ", ".join(sorted(ok["inputs"].dropna().astype(str).unique())) if "inputs" in ok else ""
    parts = []
    for fmt, rows in ok[ok["payload_image_bytes_p50"].notna()].groupby("input_format"):
        parts.append(f"{fmt}: {rows['payload_image_bytes_p50'].median() / 1e3:,.1f} KB per image at the median "
                     f"({rows['payload_image_bytes_min'].min() / 1e3:,.1f} KB to "
                     f"{rows['payload_image_bytes_max'].max() / 1e3:,.1f} KB), up to "
                     f"{int(rows['distinct_images'].max())} distinct images a trial")
    repeats = ok["input_repeats"].max() if "input_repeats" in ok else float("nan")
    repeated = (f" At most {repeats:.1f} requests per distinct request inside a trial's windows: some bytes were sent "
                "more than once (a larger `experiment.inputs.pool_mib` gives more distinct requests)."
                if pd.notna(repeats) and repeats > 1 else " No request's bytes were sent twice inside a window.")
    return [f"Inputs: the corpus {corpus or 'of this sweep'}, its images sent in turn, each request carrying other "
            f"images than the one before: {'; '.join(parts)}.{repeated}"]


def crosscheck_lines(ok: pd.DataFrame) -> list[str]:
    """What the cross-check found; a model that is not a classifier (no top-1 figure) is said to be compared by max
    abs diff only."""
    missing = pd.Series(float("nan"), index=ok.index)
    diff, top1 = (ok.get(f"crosscheck_{name}", missing) for name in ("max_abs_diff", "top1_agreement"))
    classified, diff_only = diff.notna() & top1.notna(), diff.notna() & top1.isna()
    if not (classified | diff_only).any():
        return []
    lines = []
    if classified.any():
        lines.append("Cross-check: before a server group was measured, the same images went through each of its paths "
                     "and the logits were compared with the in-process reference; over the measured trials the "
                     f"lowest top-1 agreement was {top1[classified].min():.3f} and the largest logit difference "
                     f"{diff[classified].max():.3g}.")
    if diff_only.any():
        models = ", ".join(sorted(ok.loc[diff_only, "model"].astype(str).unique())) if "model" in ok else "the model"
        lines.append(f"Cross-check of {models}: its output is not a classifier's [batch, classes] logits "
                     "(model.output_shape), so it was compared with the in-process reference by max abs diff only, "
                     f"no top-1 agreement: the largest difference was {diff[diff_only].max():.3g}.")
    return lines
