"""The report's "How close to the GPU's limit" on a SYNTHETIC sweep (made-up round numbers in a temp MLflow store,
never shown as measured): each trial set against its runtime's in-process ceiling, the ceiling figures computed by the
sweep's own `efficiency_metrics` from made-up in-process timings, one trial per verdict. Also the answer's share, each
tier's floor on the Pareto plot, and a sweep without any ceiling."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from experiments.config.compose import load_config
from experiments.config.prices import tier_price_params
from experiments.measure.efficiency import Bottleneck, efficiency_metrics
from experiments.plan import Trial
from experiments.report import plots, tables
from experiments.report.answer import answer_lines
from experiments.report.build import ReportOptions
from experiments.report.ceiling_section import (
    EMPTY,
    ceiling_section,
    level,
    outran,
    percent,
    share_sentence,
    tier_floors,
)
from experiments.report.publish import make_report
from experiments.report.render import Document
from experiments.run.trial import new_record
from serving.inprocess import RESIDENT, ROUND_TRIP, InProcessPoint, RuntimeTiming
from serving.runtime import Runtime
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store, tier_prices

SWEEP_ID = "synthetic-ceiling"
LOCAL_PRICE = 0.18  # $/h of the CPU tier `local`: $ per 1k images = 0.05 / img/s (a100: 0.36 $/h, 0.1 / img/s)
ONNX_GPU = Runtime("onnxruntime", "cuda", "fp32", provider="CUDAExecutionProvider")
TORCH_GPU = Runtime("torch", "cuda", "fp16", channels_last=True)
ONNX_CPU = Runtime("onnxruntime", "cpu", "fp32", provider="CPUExecutionProvider")
# In-process timings (synthetic): runtime -> [(mode, batch, p50 ms)]; a point's img/s is batch / p50, as timed.
# onnx/cuda: 500, 800, 1,600 img/s round trip at b1, b8, b32, 2,000 resident at b64; torch/cuda: 400, 2,000, 2,500,
# and 4,000 resident; onnx/cpu: 100 and 125 img/s at b1 and b4.
TIMINGS = {
    ONNX_GPU: [(ROUND_TRIP, 1, 2.0), (ROUND_TRIP, 8, 10.0), (ROUND_TRIP, 32, 20.0), (RESIDENT, 64, 32.0)],
    TORCH_GPU: [(ROUND_TRIP, 1, 2.5), (ROUND_TRIP, 8, 4.0), (ROUND_TRIP, 32, 12.8), (RESIDENT, 64, 16.0)],
    ONNX_CPU: [(ROUND_TRIP, 1, 10.0), (ROUND_TRIP, 4, 32.0)],
}
# (tier, variant, protocol, batch, load, runtime) -> (p50, p99, img/s, GPU busy %, verdict). A rate is an open loop;
# poisson-r60 overloaded its server (the most img/s of its runtime, so it must not be the runtime's best served).
TRIALS = {
    ("a100", "triton_onnx", "grpc", 8, "c4", ONNX_GPU): (100.0, 150.0, 400.0, 45.0, Bottleneck.QUEUE),
    ("a100", "triton_onnx", "http", 1, "c1", ONNX_GPU): (10.0, 20.0, 100.0, 20.0, Bottleneck.TRANSPORT),
    ("a100", "triton_onnx", "grpc", 1, "c1", ONNX_GPU): (8.0, 16.0, 150.0, 25.0, Bottleneck.LOAD),
    ("a100", "triton_onnx", "grpc", 8, 60.0, ONNX_GPU): (2400.0, 4800.0, 440.0, 50.0, Bottleneck.QUEUE),
    ("a100", "pytorch", "http", 8, "c4", TORCH_GPU): (200.0, 300.0, 1200.0, 85.0, Bottleneck.COMPUTE),
    ("a100", "pytorch", "http", 1, "c1", TORCH_GPU): (25.0, 45.0, 200.0, 30.0, Bottleneck.PROXY),
    ("a100", "pytorch", "http", 1, "c4", TORCH_GPU): (50.0, 90.0, 240.0, 35.0, Bottleneck.CLIENT),
    ("local", "triton_onnx", "http", 1, "c2", ONNX_CPU): (20.0, 40.0, 90.0, None, Bottleneck.CPU),
}


def _timing(runtime: Runtime) -> RuntimeTiming:
    return RuntimeTiming(runtime, [InProcessPoint(batch_size=b, mode=mode, p50_ms=p50, mean_ms=p50,
                                                  img_s=b / p50 * 1000, calls=10) for mode, b, p50 in TIMINGS[runtime]])


def _cfg(tier: str) -> object:
    if tier != "local":
        cfg = syn._cfg(tier)
    else:
        cfg = load_config(["gpu=local", f"gpu.price_per_hour_usd={LOCAL_PRICE}"])
        cfg.gpu.prices = {}
    cfg.sweep_id = SWEEP_ID
    return cfg


def build_ceiling_sweep(uri: str) -> dict[str, str]:
    """Log the ceiling sweep into `uri` (a store of its own): every trial carries what the sweep logs after timing
    its runtime in-process: param `ceiling_runtime`, the efficiency metrics and the verdict's tags."""
    sweep = syn._Sweep(uri, SWEEP_ID)
    for tier in ("a100", "local"):
        cfg = _cfg(tier)
        price = float(cfg.gpu.price_per_hour_usd)
        tier_run = sweep.tier_run(tier, {"gpu_tier": tier, "gpu_display_name": cfg.gpu.display_name,
                                         "price_per_hour_usd": price, "price_source": "test fixture",
                                         "price_seen": "2026-01-01", **tier_price_params(cfg.gpu)})
        for (t, variant, protocol, batch, load, runtime), (p50, p99, thr, busy, verdict) in TRIALS.items():
            if t != tier:
                continue
            closed = isinstance(load, str)
            trial = Trial(tier, "resnet18", variant, variant, protocol, "tensor", batch, int(load[1:]) if closed else 0)
            if not closed:
                trial = replace(trial, load_mode="poisson", request_rate=load)
            record = new_record(cfg, trial, syn.NODE)
            metrics = {**syn._metrics(p50, p99, thr, price, batch), "stable": 1.0}
            if not closed:
                metrics |= {"overloaded": 1.0, "target_rate_rps": load, "offered_rate_rps": load,
                            "achieved_rate_rps": load, "backlog_growth_requests": 30.0}
                record.tags["overloaded"] = "true"
            if busy is not None:
                metrics["gpu_util_pct"] = busy
            record.metrics = {**metrics, **efficiency_metrics(metrics, _timing(runtime), batch)}
            record.params["ceiling_runtime"] = runtime.key
            record.tags |= {"bottleneck": str(verdict), "bottleneck_evidence": f"synthetic evidence of {verdict}",
                            "bottleneck_fix": verdict.fix}
            tier_run.log(record)
        tier_run.finish()
    return sweep.finish()


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("ceiling")
    uri = premigrated_store(folder)
    build_ceiling_sweep(uri)
    return make_report(uri, "tierbench", SWEEP_ID, folder / "runs", ReportOptions(), log_to_mlflow=False)


def _section(text: str, start: str, end: str = "\n## ") -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_trials_ceiling_param_and_verdict_tags_are_read_into_the_frame(published) -> None:
    ok = published.data.ok.set_index(["tier", "stack", "batch_size", "load"])
    row = ok.loc[("a100", "pytorch/http/tensor", 8, "c4")]
    assert row["ceiling_runtime"] == "torch/cuda/fp16+channels_last"
    assert (row["bottleneck"], row["bottleneck_evidence"]) == ("compute", "synthetic evidence of compute")
    assert row["bottleneck_fix"] == Bottleneck.COMPUTE.fix
    assert row["ceiling_share"] == pytest.approx(1200 / 2000) and row["ceiling_share_best"] == pytest.approx(0.48)


def test_the_section_sets_each_runtime_against_its_ceiling(published) -> None:
    md = published.markdown.read_text()
    assert md.index("## Answer") < md.index("## How close to the GPU's limit") < md.index("## Prices")
    section = _section(md, "## How close to the GPU's limit", "\n## Prices")
    a100 = _section(section, "### Tier a100\n", "\n### ")
    # 400 img/s served against 800 in-process at b8 (the queue-bound point; the overloaded r60 is not its best).
    queue_share, of_best = f"{round(400 / 800 * 100)} %", f"{round(400 / 1600 * 100)} %"
    assert (f"| `onnxruntime/CUDAExecutionProvider/fp32` | 2.00 | 1,600.0 (b32) | 2,000.0 (b64) | "
            f"triton_onnx/grpc/tensor · b8 · c4 | 400.0 | {queue_share} (b8) | {of_best} | 45 | queue |") in a100
    assert ("| `torch/cuda/fp16+channels_last` | 2.50 | 2,500.0 (b32) | 4,000.0 (b64) | pytorch/http/tensor · b8 · c4 "
            f"| 1,200.0 | {round(1200 / 2000 * 100)} % (b8) | {round(1200 / 2500 * 100)} % | 85 | compute |") in a100
    assert "poisson-r60" not in a100.split("\n- ")[0], "an overloaded point is no runtime's best served"
    assert "device-resident" in a100 and "$2.5e-05 per 1k images at its primary price ($0.36/h)" in a100
    local = _section(section, "### Tier local\n")
    assert "This tier computes on its CPU" in local and "GPU busy" not in local and "device-resident" not in local
    assert (f"| `onnxruntime/CPUExecutionProvider/fp32` | 10.0 | 125.0 (b4) | triton_onnx/http/tensor · b1 · c2 | "
            f"90.0 | {round(90 / 100 * 100)} % (b1) | {round(90 / 125 * 100)} % | cpu |") in local
    assert "$0.0004 per 1k images" in local  # 0.18 $/h at its best 125 img/s


def test_every_verdict_is_counted_with_its_fix_and_an_example(published) -> None:
    md, page = published.markdown.read_text(), published.html.read_text()
    section = _section(md, "## How close to the GPU's limit", "\n## Prices")
    for verdict in (b for b in Bottleneck if not b.of_tokens_only):
        assert f"**{verdict}**: " in section and verdict.fix in section, verdict
        assert f"<strong>{verdict}</strong>" in page and html.escape(verdict.fix, quote=False) in page, verdict
    assert ("- **queue**: 2 trial(s). Fix: " + Bottleneck.QUEUE.fix + ". E.g. triton_onnx/grpc/tensor · b8 · c4: "
            "synthetic evidence of queue.") in section, "the example is a sustained trial"
    assert "(7 of 7 successful trials carry a verdict)" in section
    assert section.index("**client**") < section.index("**compute**") < section.index("**load**"), "the rules' order"
    assert '<h2 id="how-close-to-the-gpu-s-limit">' in page
    assert "<td class=\"txt\"><code>torch/cuda/fp16+channels_last</code></td>" in page


def test_the_summary_names_the_point_closest_to_its_ceiling(published) -> None:
    line = ("closest to the ceiling: local · triton_onnx/http/tensor · b1 · c2: 90 % of "
            "onnxruntime/CPUExecutionProvider/fp32's in-process throughput at b1 (bottleneck: cpu)")
    assert line in published.report.summary
    assert f"**C{line[1:]}.**" in published.markdown.read_text()


def test_the_answer_says_how_close_its_pick_came_to_the_ceiling(published) -> None:
    data = published.data
    labels = {t: info.label for t, info in data.tiers.items()}
    (cheapest, *_) = answer_lines(data, labels, tier_prices(data), None, lambda row: str(row["price"]))
    assert cheapest.startswith("Cheapest operating point at each tier's primary price: **a100 · pytorch/http/tensor "
                               "· b8 · c4**: **$8.33e-05 per 1k images** at p99 300.0 ms.")
    assert cheapest.endswith(f" It reaches {round(1200 / 2000 * 100)} % of its runtime's in-process throughput at "
                             "batch 8 (`torch/cuda/fp16+channels_last`; bottleneck: compute).")
    # p99 <= 50 ms: pytorch b1 c1 at 0.1 / 200 = $0.0005 is the cheapest within it; 200 of 400 img/s at b1.
    (pick, *_) = answer_lines(data, labels, tier_prices(data), 50.0, lambda row: str(row["price"]))
    assert "**a100 · pytorch/http/tensor · b1 · c1**: **$0.0005 per 1k images**" in pick
    assert pick.endswith(f"price primary). It reaches {round(200 / 400 * 100)} % of its runtime's in-process "
                         "throughput at batch 1 (`torch/cuda/fp16+channels_last`; bottleneck: proxy).")
    assert percent(1 / 3) == "33 %" and percent(0.045) == "4.5 %" and percent(float("nan")) == "—"


def test_a_point_that_outran_its_in_process_timing_is_called_a_low_timing_not_the_closest(published) -> None:
    """The local Triton point at 178 % of its runtime's round trip (a timing taken while the node was busy): the
    section says the timing reads low there, the summary names another point, the answer's sentence says so too. On a
    GPU only the device-resident best bounds a point (several instances overlap copies with compute)."""
    trials = published.data.trials.copy()
    local = (trials["tier"] == "local") & (trials["stack"] == "triton_onnx/http/tensor")
    trials.loc[local, "ceiling_share"] = 1.78
    data = replace(published.data, trials=trials)
    doc = Document("t")
    (summary,) = ceiling_section(doc, data, {t: t for t in data.tiers}, {})
    md = doc.to_markdown()
    local_md = _section(md, "### Tier local\n")
    assert "| 178 % (b1), reads low |" in local_md
    assert "1 served point(s) here outran their runtime in-process by more than 15 %" in local_md
    assert "python -m runners.ceiling ceiling.cache=false" in local_md
    assert "outran" not in _section(md, "### Tier a100\n", "\n### ")
    assert summary.startswith("closest to the ceiling: a100 · "), "a point that outran its timing is not the closest"
    row = data.ok[local].iloc[0]
    assert share_sentence(row).endswith("(`onnxruntime/CPUExecutionProvider/fp32`; bottleneck: cpu): more than a "
                                        "server can, so that in-process timing reads low (see its section).")
    gpu = pd.Series({"ceiling_share": 1.6, "ceiling_share_resident": 0.7})
    assert not outran(gpu), "1.6x the round trip with several instances, within the device-resident best"
    assert outran(gpu.replace(0.7, 1.2)) and not outran(pd.Series({"ceiling_share": 1.1}))


def test_a_point_just_past_its_in_process_timing_is_called_level_with_it(published) -> None:
    """At 108 % of its runtime's round trip (within the timing's noise) a point is still the closest, and every place
    that names its share says it is level with the timing, not past it; at 100 % nothing is said."""
    trials = published.data.trials.copy()
    local = (trials["tier"] == "local") & (trials["stack"] == "triton_onnx/http/tensor")
    trials.loc[local, "ceiling_share"] = 1.08
    trials.loc[trials["tier"] != "local", "ceiling_share"] = 0.5
    data = replace(published.data, trials=trials)
    doc = Document("t")
    (summary,) = ceiling_section(doc, data, {t: t for t in data.tiers}, {})
    local_md = _section(doc.to_markdown(), "### Tier local\n")
    assert "| 108 % (b1), level |" in local_md
    assert "1 served point(s) here read above 100 % of their runtime in-process, by no more than 15 %" in local_md
    assert "outran" not in local_md
    assert summary.startswith("closest to the ceiling: local · triton_onnx/http/tensor")
    assert summary.endswith(", level with that in-process timing, within its noise")
    row = data.ok[local].iloc[0]
    assert share_sentence(row).endswith(": level with that in-process timing, within its noise (see its section).")
    assert not level(pd.Series({"ceiling_share": 1.0})) and not level(pd.Series({"ceiling_share": 1.2}))
    assert not level(pd.Series({"ceiling_share": 1.6, "ceiling_share_resident": 0.7})), "a GPU's resident bound"


def test_each_tiers_floor_is_its_cost_at_its_best_in_process_throughput(published) -> None:
    floors = tier_floors(published.data.ok, tier_prices(published.data))
    a100, local = floors["a100"], floors["local"]
    assert (a100.img_s, a100.resident) == (4000.0, True), "the largest device-resident best of the tier"
    assert a100.usd_per_1k == pytest.approx(0.36 / 3600 / 4000 * 1000)
    assert (local.img_s, local.resident) == (125.0, False), "no resident figure on a CPU: the round trip's best"
    assert local.usd_per_1k == pytest.approx(LOCAL_PRICE / 3600 / 125 * 1000)
    assert tier_floors(published.data.ok, {"a100": tier_prices(published.data)["a100"]}).keys() == {"a100"}, "unpriced"


def test_the_pareto_plot_draws_the_floors_and_keeps_its_cost_axis_readable(published, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    md = published.markdown.read_text()
    assert "dashed: each tier's floor, at its best in-process throughput" in md
    assert (published.folder / "pareto.png").stat().st_size > 10_000
    data = published.data
    floors = tier_floors(data.ok, tier_prices(data))
    scales: dict[str, list[tuple[pd.Series, str]]] = {"y": []}
    original = plots._log_if_wide

    def recording(ax, values: pd.Series, axis: str) -> None:
        original(ax, values, axis)
        if axis == "y":
            scales["y"].append((values, ax.get_yscale()))

    monkeypatch.setattr(plots, "_log_if_wide", recording)
    labels = {t: info.label for t, info in data.tiers.items()}
    frontier = tables.pareto_frontier(data.sustained)
    for drawn in (floors, None):
        path = plots.pareto(data.sustained, frontier, labels, tmp_path / f"pareto_{bool(drawn)}.png", floors=drawn)
        assert path.stat().st_size > 10_000
    (with_floors, scale), (without, linear) = scales["y"]
    assert any(v == pytest.approx(floors["a100"].usd_per_1k) for v in with_floors) and scale == "log"
    assert without.max() / without.min() < 20 and linear == "linear", "the points alone span less than 20x"


def test_the_floor_is_named_in_the_legend_in_plain_dollars(published) -> None:
    plt = plots._pyplot()
    fig, ax = plt.subplots()
    floors = tier_floors(published.data.ok, tier_prices(published.data))
    plots._floor_lines(ax, floors, {}, {"a100": "a100", "local": "local"})
    assert ax.get_legend_handles_labels()[1] == [
        "a100 floor: $0.000025 / 1k at 4,000 img/s in-process, device-resident",
        "local floor: $0.0004 / 1k at 125 img/s in-process"]
    plt.close(fig)


@pytest.fixture(scope="module")
def without_ceiling(tmp_path_factory: pytest.TempPathFactory):
    """The flagged synthetic sweep (tests/synthetic_sweep.py): logged with no ceiling figures at all."""
    folder = tmp_path_factory.mktemp("no-ceiling")
    uri = premigrated_store(folder)
    syn.build_flagged(uri)
    return make_report(uri, "tierbench", syn.FLAGS_SWEEP_ID, folder / "runs", ReportOptions(), log_to_mlflow=False)


def test_a_sweep_without_a_ceiling_says_why_the_section_is_empty(without_ceiling) -> None:
    md, page = without_ceiling.markdown.read_text(), without_ceiling.html.read_text()
    section = _section(md, "## How close to the hardware's limit\n")
    assert section.strip() == EMPTY, "one line, and no claim of a GPU it knows nothing of"
    assert html.escape(EMPTY, quote=False).replace("`ceiling.enabled=false`", "<code>ceiling.enabled=false</code>") \
        .replace("`ceiling.json`", "<code>ceiling.json</code>") in page
    data = without_ceiling.data
    assert (data.trials[["ceiling_runtime", "bottleneck", "bottleneck_evidence", "bottleneck_fix"]] == "").all().all()
    assert tier_floors(data.ok, tier_prices(data)) == {}
    assert not any("closest to the ceiling" in line or "It reaches" in line for line in without_ceiling.report.summary)
    assert "dashed: each tier's floor" not in md and (without_ceiling.folder / "pareto.png").exists()
