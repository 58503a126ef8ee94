""""Deploy this" and "SLO search" on a SYNTHETIC settings search (made-up round numbers in a temp MLflow store, never
shown as measured) whose SLO summaries carry, for their highest load within the target, the probe's shares of its
runtime's in-process ceiling, GPU busy and verdict: a winner held back by its queue, one whose GPU is busy, one
without any such figure; and the same search logged without them, which renders as a sweep always did."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.config.compose import load_config
from experiments.config.search import add_candidate
from experiments.measure.efficiency import Bottleneck
from experiments.plan import Trial
from experiments.report.build import ReportOptions
from experiments.report.deploy import best_per_tier, closeness_text
from experiments.report.publish import make_report
from experiments.report.slo_search_section import CEILING_TEXT
from experiments.run.slo import SloProbe, SloResult
from experiments.run.trial import new_record
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store

SWEEP_ID = "synthetic-search-ceiling"
SLO_MS = 50.0
# $/h per tier: $ per 1k images = price / 3.6 / img/s (a100: 0.1 / img/s, rtx4090: 0.05, h100: 0.2).
PRICES = {"a100": 0.36, "rtx4090": 0.18, "h100": 0.72}
ONNX_CUDA, TORCH_CUDA = "onnxruntime/CUDAExecutionProvider/fp32", "torch/cuda/fp32"
# Each runtime timed in-process (synthetic img/s): round trip at batch 8 (the batch every point computed), best round
# trip at any batch, device-resident best.
CEILINGS = {ONNX_CUDA: (800.0, 1600.0, 2000.0), TORCH_CUDA: (1000.0, 1250.0, 2000.0)}
# tier -> (searched backend, its family and protocol, runtime or None where the summaries carry no ceiling figures,
# [(settings, img/s at the highest load within p99 <= 50 ms, GPU busy % there, verdict there, the search's start?)]).
SEARCHED: dict[str, tuple[str, str, str, str | None, list[tuple[dict[str, Any], float, float, Bottleneck, bool]]]] = {
    "a100": ("triton_onnx_dynbatch", "triton_onnx", "grpc", ONNX_CUDA, [
        ({"instance_count": 1, "max_queue_delay_us": 2000}, 200.0, 30.0, Bottleneck.LOAD, True),
        ({"instance_count": 2, "max_queue_delay_us": 2000}, 400.0, 55.0, Bottleneck.QUEUE, False),
        ({"instance_count": 4, "max_queue_delay_us": 2000}, 360.0, 60.0, Bottleneck.QUEUE, False)]),
    "rtx4090": ("pytorch_batched", "pytorch", "http", TORCH_CUDA, [
        ({"batch_wait_timeout_s": 0.002, "num_replicas": 1}, 300.0, 70.0, Bottleneck.QUEUE, True),
        ({"batch_wait_timeout_s": 0.002, "num_replicas": 2}, 500.0, 92.0, Bottleneck.COMPUTE, False)]),
    "h100": ("triton_onnx_dynbatch", "triton_onnx", "grpc", None, [
        ({"instance_count": 1, "max_queue_delay_us": 2000}, 600.0, 40.0, Bottleneck.LOAD, True),
        ({"instance_count": 2, "max_queue_delay_us": 2000}, 900.0, 50.0, Bottleneck.QUEUE, False)]),
}
TARGET = f"p99 ≤ {SLO_MS:g} ms"
SLO_HEADER = "tier | stack | batch | p99 target ms | max load | img/s at max | p99 ms at max | $ per 1k images | probes"


def _cfg(tier: str, sweep_id: str) -> Any:
    cfg = load_config([f"gpu={tier}", f"gpu.price_per_hour_usd={PRICES[tier]}", f"sweep_id={sweep_id}"])
    cfg.gpu.prices = {}  # only the price this fixture states
    return cfg


def _evidence(verdict: Bottleneck, img_s: float) -> str:
    return f"synthetic evidence of {verdict} at {img_s:g} img/s"


def _at_max(runtime: str, img_s: float, busy: float) -> dict[str, float]:
    """What `ServerGroup` copies from the probe at the highest load within the target: served over each ceiling."""
    at_batch, best, resident = CEILINGS[runtime]
    return {"slo_ceiling_share_at_max": img_s / at_batch, "slo_ceiling_share_best_at_max": img_s / best,
            "slo_ceiling_share_resident_at_max": img_s / resident, "slo_gpu_util_pct_at_max": busy}


def build(uri: str, sweep_id: str = SWEEP_ID, figures: bool = True) -> None:
    """Log the search into `uri`, as `BackendSearch` logs it: per candidate a trial and its SLO summary, the summary
    carrying its figures at max (where the tier has a runtime and `figures`)."""
    sweep = syn._Sweep(uri, sweep_id)
    for tier, (searched, family, protocol, runtime, candidates) in SEARCHED.items():
        cfg = _cfg(tier, sweep_id)
        tier_run = sweep.tier_run(tier, {"gpu_tier": tier, "price_per_hour_usd": PRICES[tier]})
        for values, img_s, busy, verdict, start in candidates:
            entry = add_candidate(cfg, searched, values)
            point = Trial(tier, "resnet18", family, entry, protocol, "tensor", 8, 0)
            record = new_record(cfg, point, syn.NODE)
            record.metrics = syn._metrics(20.0, 40.0, img_s, PRICES[tier], 8)
            tier_run.log(record)
            slo = new_record(cfg, point, syn.NODE)
            slo.key, slo.run_name = f"{sweep_id}-{tier}-{entry}", f"{tier}/{entry}/{protocol}/tensor/b8/slo-p99-50ms"
            slo.tags["run_level"] = "slo"
            best = SloProbe(16, 45.0, img_s)
            # On h100 the load above the best was missed by a client that fell behind its schedule: the bound is its.
            slo.metrics = SloResult(SLO_MS, best, [best], client_bound=tier == "h100").metrics(PRICES[tier])
            slo.params.update(search_of=searched, search_strategy="quick", search_start=str(start).lower(),
                              search_values=json.dumps(values, sort_keys=True))
            if figures and runtime is not None:
                slo.metrics |= _at_max(runtime, img_s, busy)
                slo.params["ceiling_runtime"] = runtime
                slo.tags |= {"bottleneck": str(verdict), "bottleneck_evidence": _evidence(verdict, img_s),
                             "bottleneck_fix": verdict.fix}
            tier_run.log(slo)
        tier_run.finish()
    sweep.finish()


def _publish(folder: Path, builder, sweep_id: str):
    uri = premigrated_store(folder)
    builder(uri)
    return make_report(uri, "tierbench", sweep_id, folder / "runs", ReportOptions(), log_to_mlflow=False)


@pytest.fixture(scope="module")
def figured(tmp_path_factory: pytest.TempPathFactory):
    return _publish(tmp_path_factory.mktemp("figured"), build, SWEEP_ID)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory):
    """The same search, its summaries without any ceiling figure (ceiling off, or a sweep logged before them)."""
    return _publish(tmp_path_factory.mktemp("bare"), lambda uri: build(uri, figures=False), SWEEP_ID)


def _section(text: str, start: str) -> str:
    return text.split(start, 1)[1].split("\n## ", 1)[0]


def _pct(share: float) -> str:
    return f"{round(share * 100)} %"


def _shares(runtime: str, img_s: float) -> tuple[str, str, str]:
    return tuple(_pct(img_s / ceiling) for ceiling in CEILINGS[runtime])


def test_the_slo_frame_carries_each_summarys_figures_at_its_highest_load(figured, bare) -> None:
    slo = figured.data.slo.set_index(["tier", "variant"])
    queue = slo.loc[("a100", "triton_onnx_dynbatch+instance_count=2+max_queue_delay_us=2000")]
    assert queue["slo_ceiling_share_at_max"] == pytest.approx(400 / 800)
    assert queue["slo_ceiling_share_best_at_max"] == pytest.approx(400 / 1600)
    assert queue["slo_ceiling_share_resident_at_max"] == pytest.approx(400 / 2000)
    assert queue["slo_gpu_util_pct_at_max"] == 55.0 and queue["ceiling_runtime"] == ONNX_CUDA
    assert (queue["bottleneck"], queue["bottleneck_fix"]) == ("queue", Bottleneck.QUEUE.fix)
    assert queue["bottleneck_evidence"] == _evidence(Bottleneck.QUEUE, 400.0)
    h100 = slo.loc["h100"]
    assert h100["slo_ceiling_share_at_max"].isna().all() and h100["slo_gpu_util_pct_at_max"].isna().all()
    assert (h100[["ceiling_runtime", "bottleneck", "bottleneck_evidence", "bottleneck_fix"]] == "").all().all()
    assert (bare.data.slo[["ceiling_runtime", "bottleneck"]] == "").all().all()
    assert bare.data.slo["slo_ceiling_share_at_max"].isna().all()


def test_each_tiers_winner_keeps_its_own_figures_not_a_neighbours(figured) -> None:
    best = best_per_tier(figured.data.slo).set_index("tier")
    assert best.loc["a100", "settings"] == "instance_count=2, max_queue_delay_us=2000"
    assert best.loc["a100", "slo_ceiling_share_at_max"] == pytest.approx(0.5), "400 img/s, not the 360 beside it"
    assert best.loc["rtx4090", "bottleneck"] == "compute" and best.loc["rtx4090", "slo_gpu_util_pct_at_max"] == 92.0
    assert pd.isna(best.loc["h100", "slo_ceiling_share_at_max"]) and best.loc["h100", "bottleneck"] == ""


def test_deploy_this_says_how_close_each_winner_came_and_what_stopped_it(figured) -> None:
    section = _section(figured.markdown.read_text(), "## Deploy this\n")
    at_batch, of_best, resident = _shares(ONNX_CUDA, 400.0)
    assert (f"- **a100** · triton_onnx_dynbatch (instance_count=2, max_queue_delay_us=2000): At its highest load "
            f"within {TARGET} it serves {at_batch} of `{ONNX_CUDA}`'s in-process throughput at its batch ({of_best} of "
            f"the runtime's best, {resident} of the device-resident best), the GPU busy 55 %. What stopped it: queue — "
            f"{_evidence(Bottleneck.QUEUE, 400.0)}. Next: {Bottleneck.QUEUE.fix}.") in section
    assert (at_batch, of_best, resident) == ("50 %", "25 %", "20 %")
    at_batch, of_best, resident = _shares(TORCH_CUDA, 500.0)
    assert (f"- **rtx4090** · pytorch_batched (batch_wait_timeout_s=0.002, num_replicas=2): At its highest load "
            f"within {TARGET} it serves {at_batch} of `{TORCH_CUDA}`'s in-process throughput at its batch "
            f"({of_best} of the runtime's best, {resident} of the device-resident best), the GPU busy 92 %. What "
            f"stopped it: compute — {_evidence(Bottleneck.COMPUTE, 500.0)}. The GPU itself is the limit: no serving "
            f"setting serves more on it. Next: {Bottleneck.COMPUTE.fix}.") in section
    assert "The GPU itself is the limit" not in section.split("- **rtx4090**")[0], "said of the busy GPU alone"
    assert "**h100** ·" not in section and "| h100 | triton_onnx_dynbatch/grpc/tensor/b8 |" in section, \
        "a winner without figures is in the table and says nothing more"
    assert _evidence(Bottleneck.QUEUE, 360.0) not in section and _evidence(Bottleneck.QUEUE, 300.0) not in section
    # rtx4090: 0.05 / 500 = $0.0001 per 1k; h100 0.2 / 900 = $0.000222 (2.22x); its start 0.05 / 300 (1.67x).
    answer = ("**Deploy pytorch_batched (batch_wait_timeout_s=0.002, num_replicas=2) on rtx4090: $0.0001 per 1k images "
              f"at 500.0 img/s within {TARGET}; 2.22× cheaper than the runner-up, h100 ($0.000222); 1.67× cheaper than "
              "its default settings.**")
    assert answer in section and section.index(answer) < section.index("How close each winner came")
    summary = figured.report.summary
    assert answer.strip("*").rstrip(".") in summary and not any("What stopped" in line for line in summary)


def test_the_page_says_the_same(figured) -> None:
    page = figured.html.read_text()
    assert (f"<li><strong>a100</strong> · triton_onnx_dynbatch (instance_count=2, max_queue_delay_us=2000): At its "
            f"highest load within {TARGET} it serves 50 % of <code>{ONNX_CUDA}</code>'s in-process throughput") in page
    queue, compute = Bottleneck.QUEUE, Bottleneck.COMPUTE
    assert html.escape(f"What stopped it: queue — {_evidence(queue, 400.0)}. Next: {queue.fix}.",
                       quote=False) + "</li>" in page
    assert html.escape(f"What stopped it: compute — {_evidence(compute, 500.0)}. The GPU itself is the limit: no "
                       f"serving setting serves more on it. Next: {compute.fix}.", quote=False) + "</li>" in page
    assert "<th>of ceiling at max</th><th>verdict at max</th>" in page


def test_the_slo_search_table_gains_the_share_and_the_verdict_at_max(figured) -> None:
    section = _section(figured.markdown.read_text(), "## SLO search\n")
    assert CEILING_TEXT.strip() in section
    align = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    assert f"| {SLO_HEADER} | of ceiling at max | verdict at max |\n{align}" in section, "the verdict is text"
    triton = "triton_onnx_dynbatch+instance_count={}+max_queue_delay_us=2000/grpc/tensor"
    serve = "pytorch_batched+batch_wait_timeout_s=0.002+num_replicas=2/http/tensor"
    # max load 16, 8 images a request, p99 45 ms at it, one probe; then the share of the runtime's 800 / 1,000 img/s.
    for tier, stack, img_s, usd, share, verdict, load in (
            ("a100", triton.format(2), 400.0, "$0.00025", _pct(400 / 800), "queue", "16"),
            ("a100", triton.format(1), 200.0, "$0.0005", _pct(200 / 800), "load", "16"),
            ("rtx4090", serve, 500.0, "$0.0001", _pct(500 / 1000), "compute", "16"),
            ("h100", triton.format(2), 900.0, "$0.000222", "—", "—", "16 (client behind above)")):
        row = f"| {tier} | {stack} | 8 | 50.0 | {load} | {img_s:.1f} | 45.0 | {usd} | 1 | {share} | {verdict} |"
        assert row in section, row


def _without_ceiling_columns(section: str) -> str:
    """The SLO section as it would read without the two columns and the sentence explaining them."""
    lines = [("|".join(line.split("|")[:-3]) + "|") if line.startswith("|") else line for line in section.split("\n")]
    return "\n".join(lines).replace(CEILING_TEXT, "")


def test_without_figures_both_sections_read_as_they_did(figured, bare) -> None:
    md, page = bare.markdown.read_text(), bare.html.read_text()
    deploy, slo = _section(md, "## Deploy this\n"), _section(md, "## SLO search\n")
    with_figures = _section(figured.markdown.read_text(), "## Deploy this\n")
    assert deploy.rstrip() == with_figures.split("How close each winner came")[0].rstrip(), "appended only"
    assert deploy.rstrip().endswith("1.67× cheaper than its default settings.**")
    assert slo == _without_ceiling_columns(_section(figured.markdown.read_text(), "## SLO search\n"))
    assert f"| {SLO_HEADER} |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n" in slo
    for added in ("How close each winner came", "What stopped it", "of ceiling at max", "verdict at max",
                  CEILING_TEXT.strip()):
        assert added not in md and html.escape(added, quote=False) not in page, added
    assert bare.report.summary == figured.report.summary


SLO_INTRO = ("For each operating point, the highest load (concurrency, or request rate in open loop) whose p99 stayed "
             "within the target, found by doubling from the grid's lowest load (halving first where that load missed), "
             "then bisection, over real trials (tag `phase=slo_search`). “at "
             "limit” means the search stopped at its load limit still within the target; “client behind above” that "
             "the load above it missed because the client fell behind its own schedule, so the server's own limit may "
             "lie higher.\n\n| tier | stack | batch | "
             "p99 target ms | max load | img/s at max | p99 ms at max | $ per 1k images | probes |\n")


def test_a_search_logged_before_the_figures_renders_as_it_did(tmp_path: Path) -> None:
    published = _publish(tmp_path, syn.build_searched, syn.SEARCH_SWEEP_ID)
    md = published.markdown.read_text()
    assert _section(md, "## SLO search\n").lstrip("\n").startswith(SLO_INTRO)
    assert _section(md, "## Deploy this\n").rstrip().endswith(
        "**Deploy triton_onnx_dynbatch (instance_count=2, max_queue_delay_us=500) on rtx4090: $0.000208 per 1k images "
        "at 240.0 img/s within p99 ≤ 50 ms; 1.20× cheaper than the runner-up, a100 ($0.00025); 1.60× cheaper than its "
        "default settings.**")
    assert "What stopped it" not in md and "of ceiling at max" not in md


def test_the_sentence_says_only_what_the_winner_carries() -> None:
    cpu = pd.Series({"ceiling_runtime": "onnxruntime/CPUExecutionProvider/fp32", "slo_ceiling_share_at_max": 0.9,
                     "slo_ceiling_share_best_at_max": 0.72, "slo_ceiling_share_resident_at_max": float("nan"),
                     "slo_gpu_util_pct_at_max": float("nan"), "bottleneck": "cpu", "bottleneck_evidence": "",
                     "bottleneck_fix": ""})
    assert closeness_text(cpu, TARGET) == (
        f"At its highest load within {TARGET} it serves 90 % of `onnxruntime/CPUExecutionProvider/fp32`'s in-process "
        f"throughput at its batch (72 % of the runtime's best). What stopped it: cpu. Next: {Bottleneck.CPU.fix}.")
    busy_only = pd.Series({"slo_gpu_util_pct_at_max": 35.0, "bottleneck": ""})
    assert closeness_text(busy_only, TARGET) == f"At its highest load within {TARGET} the GPU was busy 35 %."
    best_only = pd.Series({"slo_ceiling_share_best_at_max": 0.045})
    assert closeness_text(best_only, TARGET) == (f"At its highest load within {TARGET} it serves 4.5 % of its "
                                                 "runtime's best in-process throughput.")
    assert closeness_text(pd.Series({"tier": "a100", "bottleneck": float("nan")}), TARGET) == ""
