"""The report published from a SYNTHETIC sweep (tests/synthetic_sweep.py; the `store`, `data` and `published`
fixtures of tests/conftest.py): its files read on their own, the cross-check as the method section words it, the SLO
search, the report attached to the sweep's MLflow run, the command line, and a sweep with nothing measured."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.report.build import ReportOptions
from experiments.report.method_section import crosscheck_lines
from experiments.report.publish import make_report
from runners import report as report_cli
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store


def test_crosscheck_figures_are_read_under_their_old_names_too(data, published) -> None:
    by_tier = data.ok.groupby("tier")["crosscheck_max_abs_diff"].max()
    assert by_tier.to_dict() == pytest.approx(syn.CROSSCHECK_DIFF)  # rtx4090 logged validation_max_abs_diff
    assert "validation_max_abs_diff" not in data.ok.columns
    assert (data.ok["crosscheck_top1_agreement"] == 1.0).all()
    assert "lowest top-1 agreement was 1.000 and the largest logit difference 3e-05" in published.markdown.read_text()


def test_a_model_without_top1_is_said_to_be_compared_by_max_abs_diff_only() -> None:
    ok = pd.DataFrame({"model": ["resnet18", "dense_head", "dense_head"],
                       "crosscheck_top1_agreement": [1.0, float("nan"), float("nan")],
                       "crosscheck_max_abs_diff": [2e-5, 3e-4, 1e-4]})
    classified, diff_only = crosscheck_lines(ok)
    assert "lowest top-1 agreement was 1.000 and the largest logit difference 2e-05" in classified
    assert diff_only.startswith("Cross-check of dense_head: its output is not a classifier's"), diff_only
    assert "by max abs diff only, no top-1 agreement: the largest difference was 0.0003" in diff_only
    assert crosscheck_lines(ok.drop(columns="crosscheck_top1_agreement").iloc[1:])[0].startswith("Cross-check of")
    assert crosscheck_lines(ok.drop(columns=["crosscheck_top1_agreement", "crosscheck_max_abs_diff"])) == []


def test_report_files_read_on_their_own(published) -> None:
    folder = published.folder
    assert folder.name == "report" and folder.parent.name == syn.SWEEP_ID
    assert {p.name for p in folder.glob("*.png")} == {
        "pareto.png", "cost_per_1k.png", "latency_vs_throughput_a100.png", "latency_vs_throughput_rtx4090.png"}
    assert all(p.stat().st_size > 10_000 for p in folder.glob("*.png"))
    md = published.markdown.read_text()
    assert "**Emulated results**" in md and "rtx4090 (emulated)" in md
    assert "**rtx4090 (emulated) · triton_onnx/grpc/tensor · b1 · c1**: **$0.000533 per 1k images**" in md
    assert "at price spot $0.18/h (spot, Synthetic, seen 2026-01-01): **$0.0004 per 1k images**" in md
    assert "| triton_onnx/tensor | 1.25× | 0.80× |" in md  # gRPC speedup at concurrency 1
    assert "measurement failed: synthetic failure" in md
    assert ("1 trial(s) were measured again on a fresh server after their server failed under them" in md
            and "a100 · pytorch/http/tensor · b1 · c1 (first: earlier attempt: server crashed)" in md)
    assert "| a100 | 30.0 min | $0.18 |" in md and "| all tiers | 30.0 min | $0.18 |" in md  # benchmark cost
    assert "| rtx4090" not in md.split("## What this benchmark cost")[1].split("\n## ")[0]  # none logged there
    assert "![p99 latency vs $ per 1k images" in md
    html = published.html.read_text()
    assert html.count("data:image/png;base64,") == 4 and 'src="pareto.png"' not in html
    assert "<table>" in html and "rtx4090 (emulated)" in html


def test_report_is_attached_to_the_sweep_run(store, published) -> None:
    uri, ids = store
    assert published.logged_to == ids["sweep_run"]
    client = MlflowClient(uri)
    run = client.get_run(ids["sweep_run"])
    assert run.data.tags["report"] == "report/report.html"
    note = run.data.tags["mlflow.note.content"]
    assert f"runs/{ids['sweep_run']}/artifactPath/report/report.html" in note
    assert "rtx4090 (emulated) · triton_onnx/grpc/tensor · b1 · c1" in note
    assert run.data.metrics["min_cost_per_1k_images_usd"] == pytest.approx(0.18 / 3.6 / 300)  # rtx4090 grpc b8c4
    assert (run.data.metrics["trials_ok"], run.data.metrics["trials_failed"]) == (24, 1)
    names = {a.path for a in client.list_artifacts(ids["sweep_run"], "report")}
    assert {"report/report.md", "report/report.html", "report/pareto.png"} <= names


def test_cli_prints_the_answer_and_the_path(store, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = report_cli.main([syn.SWEEP_ID, "--tracking-uri", store[0], "--results-dir", str(tmp_path),
                            "--slo-p99-ms", "50", "--no-log"])
    out = capsys.readouterr().out
    assert code == 0
    assert "29 trials (24 ok, 1 failed, 4 skipped) on a100, rtx4090 (emulated)" in out
    assert "a100 · triton_onnx/grpc/tensor · b1 · c4: $0.0005 per 1k images" in out
    assert f"report: {tmp_path / syn.SWEEP_ID / 'report' / 'report.html'}" in out
    assert report_cli.main(["no-such-sweep", "--tracking-uri", store[0], "--results-dir", str(tmp_path)]) == 2


def test_cli_refuses_a_bad_slo(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        report_cli.parse_args(["--slo-p99-ms", "-3"])
    assert "--slo-p99-ms=-3 is not allowed" in capsys.readouterr().err


def test_a_sweep_with_nothing_measured_still_reports_why(tmp_path: Path) -> None:
    from experiments.config.compose import load_config
    from experiments.plan import Trial
    from experiments.results.records import Status
    from experiments.results.tracking import Tracker
    from experiments.run.trial import new_record
    from serving.node import NodeInfo

    uri = premigrated_store(tmp_path / "mlflow")
    tracker = Tracker(uri, "tierbench")
    sweep = tracker.sweep_run("synthetic-empty", {"synthetic": "true"})
    tier = tracker.tier_run("synthetic-empty", "local", sweep, {"gpu_tier": "local", "price_per_hour_usd": 0.0}, {})
    cfg = load_config(["gpu.price_per_hour_usd=0"])
    record = new_record(cfg, Trial("local", "resnet18", "triton_trt", "triton_trt", "http", "tensor", 1, 1),
                        NodeInfo("h", "127.0.0.1", "n", "cpu", 2), status=Status.SKIPPED, reason="needs an NVIDIA GPU")
    tracker.log_trial(tier, record, tmp_path / "none", {"sweep_id": "synthetic-empty", "emulated": "false"}, "")
    published = make_report(uri, "tierbench", "synthetic-empty", tmp_path / "runs", ReportOptions(slo_p99_ms=10))
    md = published.markdown.read_text()
    assert "No trial succeeded" in md and "needs an NVIDIA GPU" in md
    assert published.report.summary == ["no successful trial"]


def test_slo_search_results_are_reported_per_operating_point(data, published) -> None:
    (row,) = data.slo.itertuples()
    assert (row.tier, row.variant, row.protocol, row.slo_max_load) == ("a100", "triton_onnx", "grpc", 6)
    assert row.cost_per_1k_images_at_slo_usd == pytest.approx(0.36 / 3600 / 240.0 * 1000)
    assert "slo" not in set(data.trials["run_name"].str.rsplit("/", n=1).str[-1])  # not mixed into the trials
    markdown = published.markdown.read_text()
    assert "# SLO search" in markdown
    assert "| a100 | triton_onnx/grpc/tensor | 1 | 45.0 | 6 | 240.0 |" in markdown


def test_trials_measured_once_have_no_intervals_and_no_noise_verdict(published) -> None:
    md = published.markdown.read_text()
    assert "95 % interval" not in md and "noise" not in md.lower() and "`experiment.repeats`" not in md
