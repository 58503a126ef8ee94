"""The report's "The studies, reproduced" section from a SYNTHETIC trial frame (made-up round numbers, never shown as
measured): each study's table in its shape, the right trials in each cell, and a reason where a stack was not
measured."""

from __future__ import annotations

import pandas as pd

from experiments.config.compose import load_config
from experiments.config.stacks import stacks
from experiments.plan import plan_trials
from experiments.report.render import Document
from experiments.report.studies import studies_section


def _trial(variant: str, protocol: str, fmt: str, batch: int, conc: int, p50: float, thr: float,
           status: str = "ok", reason: str = "", family: str | None = None, payload: float = 0.0) -> dict:
    return {"tier": "local", "backend": family or variant, "variant": variant, "protocol": protocol,
            "input_format": fmt, "batch_size": batch, "concurrency": conc, "status": status, "reason": reason,
            "latency_p50_ms": p50 if status == "ok" else float("nan"),
            "throughput_img_s": thr if status == "ok" else float("nan"), "marks": "",
            "payload_bytes_per_image": payload}


def _frame() -> pd.DataFrame:
    rows = []
    for batch, p50 in ((1, 10.0), (8, 40.0)):
        rows += [_trial("fastapi", "http", "jpeg_base64", batch, 1, 2 * p50, batch * 50.0, payload=4000.0),
                 _trial("fastapi", "http", "jpeg", batch, 1, 1.5 * p50, batch * 60.0, payload=3000.0),
                 _trial("triton_onnx", "http", "tensor", batch, 1, p50, batch * 100.0),
                 _trial("triton_onnx", "grpc", "tensor", batch, 1, p50 / 2, batch * 200.0),
                 _trial("triton_onnx_dynbatch", "grpc", "tensor", batch, 1, 1.0, 1.0, family="triton_onnx"),
                 _trial("triton_trt", "http", "tensor", batch, 1, 0, 0, "skipped", "the TensorRT execution "
                        "provider needs an NVIDIA GPU; node vm has none")]
    rows += [_trial("fastapi", "http", "jpeg_base64", 1, 8, 30.0, 260.0),
             _trial("triton_onnx", "http", "tensor", 1, 8, 20.0, 400.0),
             _trial("torchserve", "http", "jpeg_base64", 1, 1, 25.0, 40.0),
             _trial("torchserve", "http", "jpeg_base64", 1, 8, 60.0, 130.0),
             _trial("torchserve", "grpc", "jpeg_base64", 1, 1, 0, 0, "skipped", "TorchServe's gRPC carries bytes"),
             _trial("torchserve", "grpc", "jpeg", 1, 1, 15.0, 66.0)]
    return pd.DataFrame(rows)


def _section() -> str:
    doc = Document("t")
    studies_section(doc, _frame(), {"local": "Local CPU"})
    return doc.to_markdown()


def test_the_five_way_tables_have_the_studys_rows_and_figures() -> None:
    text = _section()
    assert "## The studies, reproduced" in text and "### Tier Local CPU" in text
    serial = text.split("**Serial p50 latency (ms)**")[1].split("**Serial throughput")[0]
    assert "| PyTorch FastAPI HTTP (base64 JPEG) | 20.0 | 80.0 |" in serial
    assert "| Triton ONNX gRPC | **5.00** | **20.0** |" in serial, "the plain variant, not triton_onnx_dynbatch"
    speedup = text.split("**gRPC speedup over HTTP**")[1].split("**Concurrent")[0]
    assert "| ONNX gRPC/HTTP | 2.00× | 2.00× |" in speedup
    concurrent = text.split("**Concurrent throughput (batch 1, img/s)**")[1].split("Not measured")[0]
    assert "| Triton ONNX HTTP | 100.0 | **400.0** |" in concurrent
    assert "Triton TRT HTTP: skipped: the TensorRT execution provider needs an NVIDIA GPU" in text
    assert "Triton TRT gRPC: not in this sweep" in text


def test_the_torchserve_post_table_and_the_format_held_apart() -> None:
    text = _section()
    post = text.split("The TorchServe post: REST vs gRPC")[1].split("Input format")[0]
    assert "| REST | 25.0 | 130.0 (c=8) |" in post
    assert "| gRPC | skipped | skipped | 15.0 | 66.0 (c=1) |" in post
    assert "gRPC B64: skipped: TorchServe's gRPC carries bytes" in post and "REST Binary: not in this sweep" in post
    fmt = text.split("#### Input format, on the same server")[1]
    assert "| FastAPI | 1 | 20.0 | 15.0 | 1.33× | 4,000 | 3,000 |" in fmt


def test_no_study_stack_no_section() -> None:
    doc = Document("t")
    studies_section(doc, _frame().assign(backend="pytorch"), {})
    assert "studies" not in doc.to_markdown()


def test_the_study_preset_plans_exactly_its_stacks_one_factor_at_a_time() -> None:
    cfg = load_config(["experiment=study"])
    assert len(stacks(cfg.experiment)) == len(cfg.experiment.stacks) == 15
    trials = [t for g in plan_trials(cfg) for t in g.trials]
    per_stack = {(t.variant, t.protocol, t.input_format) for t in trials}
    assert len(per_stack) == 15 and len(trials) == 15 * (5 + 2), "5 batch sizes at c1, then c8 and c16 at b1"
    assert {(t.batch_size, t.concurrency) for t in trials} == {(1, 1), (4, 1), (8, 1), (16, 1), (32, 1), (1, 8),
                                                               (1, 16)}
