"""The studies this tool generalises, in their own shape (`experiment=study`: "Step 7: 5-Way Protocol Comparison", a
protocol study on an RTX 4090 and an A100 SXM4 of February 2026, and Miguel Mendez's post "Image Transmission for
Computer Vision: A Comparison of Torchserve's REST and gRPC", February 2023, github.com/mmeendez8/grpc_vs_rest): per
tier,

- the 5-way study: its five stacks (FastAPI + base64 JPEG; Triton ONNX Runtime CUDA EP and TensorRT EP, each over
  HTTP and gRPC with float32 tensors): serial p50 and throughput by batch size, gRPC speedup over HTTP per pair (p50
  HTTP / p50 gRPC, the same server on both sides: transport only), concurrent throughput at batch 1;
- the TorchServe post: REST vs gRPC x base64 vs binary JPEG;
- what the study confounded, apart: each server's base64 JPEG beside the same files sent binary.

A stack is matched by its backend family (the trial param `backend`), protocol and input format, preferring the
variant named like the family (`triton_onnx` over `triton_onnx_dynbatch`). A cell the sweep did not measure says why
(the trial's skip or failure reason), never a number from elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from experiments.report.render import Document, format_frame, ms, rate, ratio
from experiments.report.served import marked_table
from experiments.report.tables import MARKS, P50, THROUGHPUT
from experiments.results.records import Status


@dataclass(frozen=True)
class StudyStack:
    label: str
    family: str  # the trial param `backend`
    protocol: str
    input_format: str


FIVE_WAY = (
    StudyStack("PyTorch FastAPI HTTP (base64 JPEG)", "fastapi", "http", "jpeg_base64"),
    StudyStack("Triton ONNX HTTP", "triton_onnx", "http", "tensor"),
    StudyStack("Triton ONNX gRPC", "triton_onnx", "grpc", "tensor"),
    StudyStack("Triton TRT HTTP", "triton_trt", "http", "tensor"),
    StudyStack("Triton TRT gRPC", "triton_trt", "grpc", "tensor"),
)
PAIRS = (("ONNX gRPC/HTTP", FIVE_WAY[1], FIVE_WAY[2]), ("TRT gRPC/HTTP", FIVE_WAY[3], FIVE_WAY[4]))
TORCHSERVE = {(protocol, fmt): StudyStack(f"TorchServe {name} {label}", "torchserve", protocol, fmt)
              for protocol, name in (("http", "REST"), ("grpc", "gRPC"))
              for fmt, label in (("jpeg_base64", "B64"), ("jpeg", "Binary"))}
# Base64 beside binary on each server that takes both (the study's confound, apart).
FORMAT_SERVERS = (("FastAPI", "fastapi", "http"), ("Ray Serve", "pytorch", "http"), ("TorchServe REST", "torchserve",
                                                                                     "http"))


def _rows(trials: pd.DataFrame, stack: StudyStack) -> pd.DataFrame:
    """The trials of `stack` (every status), from the variant named like the family when there is one."""
    rows = trials[(trials["backend"] == stack.family) & (trials["protocol"] == stack.protocol)
                  & (trials["input_format"] == stack.input_format)]
    if (rows["variant"] == stack.family).any():
        rows = rows[rows["variant"] == stack.family]
    elif not rows.empty:
        rows = rows[rows["variant"] == sorted(rows["variant"].unique())[0]]
    return rows


def _why_not(rows: pd.DataFrame) -> str:
    """Why a stack has no figure: its trials' skip or failure reason, or that the sweep did not plan it."""
    if rows.empty:
        return "not in this sweep"
    bad = rows[rows["status"] != Status.OK]
    if bad.empty:
        return "—"
    reason = str(bad.iloc[0]["reason"]).split(";")[0]
    return f"{bad.iloc[0]['status']}: {reason[:160]}"


def _closed(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["status"] == Status.OK) & (rows["concurrency"].fillna(0) > 0)]


def _serial(rows: pd.DataFrame) -> pd.DataFrame:
    """The lowest concurrency's trials (the study's serial pass: one request at a time)."""
    closed = _closed(rows)
    return closed[closed["concurrency"] == closed["concurrency"].min()] if not closed.empty else closed


def _by(rows: pd.DataFrame, column: str, metric: str) -> tuple[pd.Series, pd.Series]:
    indexed = rows.drop_duplicates(column).set_index(column)
    return indexed[metric], indexed[MARKS]


def _table(doc: Document, stacks: list[tuple[str, pd.DataFrame]], column: str, prefix: str, metric: str,
           fmt, best: str) -> None:
    """One row per stack, one column per value of `column` (batch size or concurrency); a stack without figures
    says why in its first cell."""
    values, row_marks = {}, {}
    for label, rows in stacks:
        if rows.empty:
            continue
        values[label], row_marks[label] = _by(rows, column, metric)
    frame = pd.DataFrame(values).T
    marks = pd.DataFrame(row_marks).T.reindex(index=frame.index, columns=frame.columns).fillna("")
    frame.columns = [f"{prefix}{int(c)}" for c in frame.columns]
    marks.columns = frame.columns
    out = format_frame(frame, {c: fmt for c in frame.columns}, best={c: best for c in frame.columns}, marks=marks)
    out = out.reset_index().rename(columns={"index": "stack"})
    if out.empty:
        return
    marked_table(doc, out, [False] + [True] * (out.shape[1] - 1), marks)


def five_way(doc: Document, trials: pd.DataFrame) -> None:
    """The 5-way study's tables for one tier's trials."""
    found = [(s.label, _rows(trials, s)) for s in FIVE_WAY]
    doc.h(3, "The 5-way study")
    doc.p("The study's five stacks (“Step 7: 5-Way Protocol Comparison”, an RTX 4090 and an A100, February 2026): "
          "its baseline sent base64 JPEGs to FastAPI, the others float32 tensors to Triton, so its rows differ in "
          "format as much as in server (see “Input format, on the same server” below).")
    serial = [(label, _serial(rows)) for label, rows in found]
    if any(not rows.empty for _, rows in serial):
        doc.p("**Serial p50 latency (ms)** by batch size, one request at a time:")
        _table(doc, serial, "batch_size", "b=", P50, ms, "min")
        doc.p("**Serial throughput (img/s)** by batch size:")
        _table(doc, serial, "batch_size", "b=", THROUGHPUT, rate, "max")
        _speedups(doc, dict(serial))
    concurrent = [(label, _closed(rows)[_closed(rows)["batch_size"] == 1]) for label, rows in found]
    if any(rows["concurrency"].nunique() > 1 for _, rows in concurrent):
        doc.p("**Concurrent throughput (batch 1, img/s)** by concurrency:")
        _table(doc, concurrent, "concurrency", "c=", THROUGHPUT, rate, "max")
    missing = [f"{label}: {_why_not(rows)}" for label, rows in found if _closed(rows).empty]
    if missing:
        doc.p("Not measured here: " + "; ".join(missing) + ".")


def _speedups(doc: Document, serial: dict[str, pd.DataFrame]) -> None:
    values, pair_marks = {}, {}
    for name, http, grpc in PAIRS:
        a, b = serial[http.label], serial[grpc.label]
        if a.empty or b.empty:
            continue
        (p50_http, marks_http), (p50_grpc, marks_grpc) = _by(a, "batch_size", P50), _by(b, "batch_size", P50)
        values[name] = (p50_http / p50_grpc).dropna()
        pair_marks[name] = (marks_http + marks_grpc).reindex(values[name].index).fillna("")
    if not values:
        return
    frame = pd.DataFrame(values).T
    marks = pd.DataFrame(pair_marks).T.reindex(index=frame.index, columns=frame.columns).fillna("")
    frame.columns = marks.columns = [f"b={int(c)}" for c in frame.columns]
    doc.p("**gRPC speedup over HTTP** (same server, p50 HTTP / p50 gRPC; > 1: gRPC faster):")
    out = format_frame(frame, {c: ratio for c in frame.columns}, marks=marks).reset_index()
    marked_table(doc, out.rename(columns={"index": "pair"}), [False] + [True] * frame.shape[1], marks)


def torchserve_post(doc: Document, trials: pd.DataFrame) -> None:
    """The TorchServe post's table: REST vs gRPC x base64 vs binary, batch 1."""
    cells = {key: _rows(trials, stack) for key, stack in TORCHSERVE.items()}
    if all(rows.empty for rows in cells.values()):
        return
    doc.h(3, "The TorchServe post: REST vs gRPC, base64 vs binary")
    doc.p("Miguel Mendez's post “Image Transmission for Computer Vision: A Comparison of Torchserve's REST and gRPC” "
          "(February 2023, github.com/mmeendez8/grpc_vs_rest): one image per request (batch 1). p50 at the lowest "
          "concurrency, and throughput at the highest (the post timed 20 concurrent requests). Its gRPC base64 cell "
          "was empty: TorchServe's gRPC request carries bytes, not JSON.")
    table, missing = [], []
    for protocol, name in (("http", "REST"), ("grpc", "gRPC")):
        row = {"": name}
        for fmt, label in (("jpeg_base64", "B64"), ("jpeg", "Binary")):
            rows = cells[(protocol, fmt)]
            ok = _closed(rows)
            ok = ok[ok["batch_size"] == ok["batch_size"].min()] if not ok.empty else ok
            if ok.empty:
                why = _why_not(rows)
                row[f"{label} p50 ms"] = row[f"{label} img/s"] = why.split(":")[0]
                missing.append(f"{name} {label}: {why}")
                continue
            serial = ok[ok["concurrency"] == ok["concurrency"].min()].iloc[0]
            busiest = ok[ok["concurrency"] == ok["concurrency"].max()].iloc[0]
            row[f"{label} p50 ms"] = ms(serial[P50]) + (f" {serial[MARKS]}" if serial[MARKS] else "")
            row[f"{label} img/s"] = (rate(busiest[THROUGHPUT]) + f" (c={int(busiest['concurrency'])})"
                                     + (f" {busiest[MARKS]}" if busiest[MARKS] else ""))
        table.append(row)
    doc.table(pd.DataFrame(table), [False, True, True, True, True])
    if missing:
        doc.p("Not measured here: " + "; ".join(missing) + ".")


def format_effect(doc: Document, trials: pd.DataFrame) -> None:
    """Base64 beside binary JPEG on each server that takes both: what the format costs, server held fixed."""
    rows = []
    for name, family, protocol in FORMAT_SERVERS:
        b64 = _serial(_rows(trials, StudyStack("", family, protocol, "jpeg_base64")))
        binary = _serial(_rows(trials, StudyStack("", family, protocol, "jpeg")))
        if b64.empty or binary.empty:
            continue
        a = b64[b64["batch_size"] == b64["batch_size"].min()].iloc[0]
        b = binary[binary["batch_size"] == a["batch_size"]]
        if b.empty:
            continue
        b = b.iloc[0]
        rows.append({"server": name, "batch": int(a["batch_size"]), "base64 p50 ms": ms(a[P50]),
                     "binary p50 ms": ms(b[P50]), "base64 / binary": ratio(a[P50] / b[P50]),
                     "base64 bytes/img": f"{a.get('payload_bytes_per_image', float('nan')):,.0f}",
                     "binary bytes/img": f"{b.get('payload_bytes_per_image', float('nan')):,.0f}"})
    if rows:
        doc.h(3, "Input format, on the same server")
        doc.p("The same JPEG files as base64 strings in JSON, and as binary, to the same server, one request at a "
              "time: what the study's baseline format costs once the server is held fixed.")
        doc.table(pd.DataFrame(rows), [False, True, True, True, True, True, True])


def studies_section(doc: Document, trials: pd.DataFrame, labels: dict[str, str]) -> None:
    """Per tier, the studies' tables, when the sweep measured any of their stacks."""
    study_stacks = [*FIVE_WAY, *TORCHSERVE.values()]
    tiers = [t for t in sorted(trials["tier"].dropna().unique())
             if any(not _rows(trials[trials["tier"] == t], s).empty for s in study_stacks)]
    if not tiers:
        return
    doc.h(1, "The studies, reproduced")
    doc.p("The two studies this tool generalises, in their own tables, from this sweep's trials (every figure "
          "measured as the rest of this report: warm-up dropped, stable windows, percentiles from raw samples). "
          "`experiment=study` measures all of their stacks.")
    for tier in tiers:
        rows = trials[trials["tier"] == tier]
        doc.h(2, f"Tier {labels.get(tier, tier)}")
        five_way(doc, rows)
        torchserve_post(doc, rows)
        format_effect(doc, rows)
