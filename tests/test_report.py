"""The report on a SYNTHETIC sweep (tests/synthetic_sweep.py: round made-up numbers in a temp MLflow store):
exact table values, the SLO pick, prices, emulated marking, problems, files and the MLflow attachment."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.report import tables
from experiments.report.build import ReportOptions
from experiments.report.data import ReportError, load_sweep
from experiments.report.method_section import crosscheck_lines
from experiments.report.publish import make_report
from runners import report as report_cli
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    uri = premigrated_store(tmp_path_factory.mktemp("report") / "mlflow")
    return uri, syn.build(uri)


@pytest.fixture(scope="module")
def data(store):
    return load_sweep(store[0], "tierbench", syn.SWEEP_ID)


def _prices(data) -> dict:
    return {name: info.prices for name, info in data.tiers.items()}


def test_runs_load_one_row_per_trial_with_the_latest_ok_run_of_a_rerun(data) -> None:
    assert len(data.trials) == 2 * 12 + 2 * 2 + 1  # ok points, skipped TRT, one failure
    assert data.superseded == 1
    rerun = data.trials[(data.trials["tier"] == "a100") & (data.trials["run_name"] == "a100/pytorch/http/tensor/b1/c1")]
    assert list(rerun["status"]) == ["ok"]
    assert len(data.ok) == 24
    assert data.tiers["rtx4090"].emulated and not data.tiers["a100"].emulated
    assert data.tiers["rtx4090"].label == "rtx4090 (emulated)"


def test_latest_resolves_to_the_last_sweep(store) -> None:
    assert load_sweep(store[0], "tierbench", "latest").sweep_id == syn.SWEEP_ID
    with pytest.raises(ReportError, match="no runs tagged sweep_id='nope'"):
        load_sweep(store[0], "tierbench", "nope")
    with pytest.raises(ReportError, match="no experiment 'other'"):
        load_sweep(store[0], "other", "latest")


def test_prices_come_back_from_the_tier_runs_with_their_sources(data) -> None:
    a100 = data.tiers["a100"].prices
    assert [(p.name, p.usd_per_hour, p.kind) for p in a100] == [("primary", 0.36, ""), ("spot", 0.18, "spot")]
    assert a100[1].source == "test fixture" and a100[1].seen == "2026-01-01"
    assert [p.name for p in data.tiers["rtx4090"].prices] == ["primary"]


def test_p50_and_throughput_by_batch(data) -> None:
    a100 = data.ok[data.ok["tier"] == "a100"]
    p50 = tables.by_batch(a100, tables.P50)
    assert list(p50) == ["c1", "c4"]
    assert p50["c1"].loc["triton_onnx/grpc/tensor", 8] == 50.0
    assert p50["c4"].loc["pytorch/http/tensor", 1] == 50.0
    thr = tables.by_batch(a100, tables.THROUGHPUT)
    assert thr["c4"].loc["triton_onnx/grpc/tensor", 8] == 400.0


def test_grpc_over_http_speedup(data) -> None:
    for tier in ("a100", "rtx4090"):  # rtx4090's p50s are a100's x2: same ratios
        speedup = tables.grpc_speedup(data.ok[data.ok["tier"] == tier])
        assert speedup["c1"].loc["triton_onnx/tensor", 1] == pytest.approx(10 / 8)
        assert speedup["c1"].loc["triton_onnx/tensor", 8] == pytest.approx(40 / 50)
        assert speedup["c4"].loc["triton_onnx/tensor", 1] == pytest.approx(30 / 20)
        assert speedup["c4"].loc["triton_onnx/tensor", 8] == pytest.approx(100 / 80)
        assert list(speedup["c1"].index) == ["triton_onnx/tensor"]  # pytorch has no gRPC pair


def test_concurrency_scaling(data) -> None:
    scaling = tables.concurrency_scaling(data.ok[data.ok["tier"] == "a100"])
    assert scaling[1].loc["triton_onnx/http/tensor", "scaling"] == pytest.approx(1.3)
    assert scaling[1].loc["triton_onnx/grpc/tensor", "scaling"] == pytest.approx(1.6)
    assert scaling[8].loc["pytorch/http/tensor", "scaling"] == pytest.approx(2.0)
    assert scaling[8].loc["pytorch/http/tensor", 4] == 160.0


def test_cross_tier_ratios(data) -> None:
    ratios = tables.cross_tier(data.ok, "a100", "rtx4090")
    assert len(ratios) == 12
    assert ratios["p50_ratio"].tolist() == pytest.approx([2.0] * 12)
    assert ratios["throughput_ratio"].tolist() == pytest.approx([0.75] * 12)
    assert ratios["cost_ratio"].tolist() == pytest.approx([(0.18 / 0.75) / 0.36] * 12)  # 2/3
    row = ratios.loc[("triton_onnx/grpc/tensor", 1, "c4")]
    assert (row["p50_a100"], row["p50_rtx4090"]) == (20.0, 40.0)


def test_cost_per_1k_images_at_every_price(data) -> None:
    by_tier = tables.cost_by_tier(data.ok)
    assert by_tier.loc[("triton_onnx/http/tensor", 1, "c1"), "a100"] == pytest.approx(0.001)  # 0.36/3600/100*1000
    assert by_tier.loc[("triton_onnx/http/tensor", 1, "c1"), "rtx4090"] == pytest.approx(0.18 / 3.6 / 75)
    images = tables.cost_by_tier(data.ok, "images_per_usd")
    assert images.loc[("pytorch/http/tensor", 8, "c4"), "a100"] == pytest.approx(160 * 3600 / 0.36)
    a100 = data.ok[data.ok["tier"] == "a100"]
    costs = tables.costs_at_prices(a100, data.tiers["a100"].prices)
    point = costs.loc[("triton_onnx/grpc/tensor", 1, "c4")]
    assert point["primary"] == pytest.approx(0.0005) and point["spot"] == pytest.approx(0.00025)
    assert point["images_per_usd"] == pytest.approx(2_000_000)
    # the report's own formula agrees with the metric the sweep logged
    assert (costs["primary"].values == pytest.approx(a100.set_index(tables.POINT).sort_index()
                                                      ["cost_per_1k_images_usd"].values))


def test_slo_pick_at_the_primary_price_and_at_any_price(data) -> None:
    priced = tables.priced_points(data.ok, _prices(data))
    pick = tables.slo_pick(priced, 35.0)
    # p99 <= 35: a100 onnx-http b1c1 ($0.001), a100 onnx-grpc b1c1 ($0.0008), rtx4090 onnx-grpc b1c1 ($0.000533)
    assert (pick["tier"], pick["stack"], pick["batch_size"], pick["load"]) == (
        "rtx4090", "triton_onnx/grpc/tensor", 1, "c1")
    assert pick["cost_per_1k_usd"] == pytest.approx(0.18 / 3.6 / 93.75)
    anywhere = tables.slo_pick(priced, 35.0, price=None)  # a100 at its spot price: 0.18/3.6/125 = $0.0004
    assert (anywhere["tier"], anywhere["stack"], anywhere["price"]) == ("a100", "triton_onnx/grpc/tensor", "spot")
    assert anywhere["cost_per_1k_usd"] == pytest.approx(0.0004)
    assert tables.slo_pick(priced, 50.0)["cost_per_1k_usd"] == pytest.approx(0.0005)  # a100 grpc b1c4
    assert tables.slo_pick(priced, 5.0) is None


def test_pareto_frontier_is_exactly_the_undominated_points(data) -> None:
    frontier = tables.pareto_frontier(data.ok)
    pts = data.ok[[tables.P99, "cost_per_1k_images_usd"]]
    expected = {i for i, (x, y) in pts.iterrows()
                if not any((x2 <= x and y2 <= y) and (x2 < x or y2 < y) for _, (x2, y2) in pts.iterrows())}
    assert set(frontier.index) == expected
    assert frontier[tables.P99].is_monotonic_increasing
    assert frontier["cost_per_1k_images_usd"].is_monotonic_decreasing
    assert frontier.iloc[0][tables.P99] == 16.0  # the fastest point is always on it


def test_problems_group_failed_and_skipped_with_reasons(data) -> None:
    bad = tables.problems(data.trials)
    assert bad.iloc[0]["status"] == "failed"
    assert bad.iloc[0]["reason"] == "measurement failed: synthetic failure"
    assert bad.iloc[0]["trials"] == "pytorch/http/jpeg/b1/c1"
    skipped = bad[bad["status"] == "skipped"]
    assert skipped["count"].tolist() == [2, 2]
    assert set(skipped["trials"]) == {"triton_trt/grpc/tensor/b1/c1, triton_trt/http/tensor/b1/c1"}


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


def test_missing_optional_metrics_are_left_out_and_shown_when_present(data) -> None:
    assert tables.present(data.ok, tables.SERVER_METRICS) == []
    with_server = data.ok.assign(server_queue_ms=1.5)
    assert tables.present(with_server, tables.SERVER_METRICS) == ["server_queue_ms"]


@pytest.fixture(scope="module")
def published(store, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("out")
    return make_report(store[0], "tierbench", syn.SWEEP_ID, out, ReportOptions(slo_p99_ms=35.0))


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


def test_search_runs_leaves_the_global_tracking_uri_alone(store, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////tmp/elsewhere.db")
    load_sweep(store[0], "tierbench", syn.SWEEP_ID)
    import os

    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:////tmp/elsewhere.db"
    assert mlflow.get_tracking_uri() == "sqlite:////tmp/elsewhere.db"


def test_by_batch_has_a_cell_per_measured_point_only() -> None:
    rows = [{"stack": s, "batch_size": b, "load": "c1", tables.P50: float(b)}
            for s, b in itertools.product(["x/http/tensor"], [1, 8])]
    rows.append({"stack": "y/http/tensor", "batch_size": 1, "load": "c1", tables.P50: 3.0})
    pivot = tables.by_batch(pd.DataFrame(rows), tables.P50)["c1"]
    assert pivot.loc["x/http/tensor", 8] == 8.0 and pd.isna(pivot.loc["y/http/tensor", 8])


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


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory):
    """The flagged synthetic sweep (tests/synthetic_sweep.py FLAGGED), its data and its published report."""
    folder = tmp_path_factory.mktemp("flagged")
    uri = premigrated_store(folder)
    ids = syn.build_flagged(uri)
    published = make_report(uri, "tierbench", syn.FLAGS_SWEEP_ID, folder / "runs", ReportOptions(slo_p99_ms=45.0))
    return uri, ids, published


def _answer(data, slo: float | None) -> list[str]:
    from experiments.report.answer import answer_lines

    labels = {t: info.label for t, info in data.tiers.items()}
    return answer_lines(data, labels, _prices(data), slo, lambda row: str(row["price"]))


def test_open_loop_rates_are_points_of_their_own(flagged) -> None:
    data = flagged[2].data
    assert list(data.ok["load"].cat.categories) == ["c1", "c4", "poisson-r60", "poisson-r100"]
    over = data.ok[data.ok["overloaded"]]
    assert list(over["load"]) == ["poisson-r60"] and over["marks"].iloc[0] == "‡"


def test_an_overloaded_trial_is_never_the_answer_nor_on_the_frontier(flagged) -> None:
    uri, ids, published = flagged
    data = published.data
    overloaded = data.ok[data.ok["overloaded"]].index[0]
    # Counted in, the overloaded trial would be the cheapest point and on the frontier ...
    assert tables.slo_pick(tables.priced_points(data.ok, _prices(data)), 10_000)["load"] == "poisson-r60"
    assert overloaded in tables.pareto_frontier(data.ok).index
    # ... but it is not what the server sustained: left out of the answer at any target and of the frontier.
    assert overloaded not in data.sustained.index and overloaded not in tables.pareto_frontier(data.sustained).index
    for slo in (None, 10_000.0):
        assert "b8 · c4**: **$0.00025 per 1k images**" in _answer(data, slo)[0]
    md = published.markdown.read_text()
    assert "1 open-loop trial(s) overloaded their server (‡) and are left out" in md
    assert "# Overloaded trials" in md
    assert ("| a100 | triton_onnx/grpc/tensor | 8 | poisson-r60 | 60.2 | 55.0 | 440.0 | 31 | 2400.0 | "
            "60.2 req/s arrived, 55.0 served: 31 more requests waiting at the end |") in md
    frontier = md[md.index("Pareto frontier: p99"):md.index("![p99 latency")]
    assert "poisson-r60" not in frontier
    run = MlflowClient(uri).get_run(ids["sweep_run"])
    assert run.data.metrics["min_cost_per_1k_images_usd"] == pytest.approx(0.1 / 400)  # not 0.1 / 440
    assert run.data.metrics["trials_overloaded"] == 1 and run.data.metrics["trials_unstable"] == 2


def test_a_stalled_trial_is_listed_with_its_longest_gap_and_named_in_the_summary(flagged) -> None:
    """Only the trial whose gap is ten times its p50 (500 ms against 9 ms) is a stall; the others logged none."""
    published = flagged[2]
    md = published.markdown.read_text()
    start = md.index("## Stalls")
    stalls = md[start:md.index("\n#", start + 3)]
    assert "| a100 | triton_onnx/grpc/tensor | 1 | poisson-r100 | ok | 500.0 | 9.00 | 30.0 | 506.0 |" in stalls
    assert stalls.count("| a100 |") == 1
    assert ("1 trial(s) stalled: their server answered nothing for up to 500.0 ms while requests waited"
            in "\n".join(published.report.summary))
    assert "Stalls" in published.html.read_text()


def test_the_answer_prefers_stable_trials_and_says_when_the_pick_is_unstable(flagged) -> None:
    data = flagged[2].data
    # p99 <= 45 ms: b1/c4 is cheaper ($0.0005) but unstable; the stable b1/c1 ($0.0008) is the answer.
    (pick, *_) = _answer(data, 45.0)
    assert "b1 · c1**: **$0.0008 per 1k images**" in pick and "Unstable" not in pick
    # p99 <= 12 ms: only the unstable pytorch point qualifies: picked, and said so.
    (pick, *_) = _answer(data, 12.0)
    assert "pytorch/http/tensor · b1 · c1**" in pick and "† *Unstable*: its windows never agreed" in pick
    # Without a target, the lowest p99 is the stable 16 ms, not the unstable 10 ms.
    assert "Lowest p99: **a100 · triton_onnx/grpc/tensor · b1 · c1**: 16.0 ms" in _answer(data, None)[1]
    assert "2 of 5 trials are unstable (†" in _answer(data, None)[3]


def test_unstable_and_overloaded_figures_are_marked_in_every_table_and_plot(flagged) -> None:
    published = flagged[2]
    md = published.markdown.read_text()
    assert "| triton_onnx/grpc/tensor | 20.0 † | 80.0 |" in md  # p50 by batch, concurrency 4
    assert "† unstable (its measurement windows never agreed within the stability rule): 1 of 2 figures." in md
    assert "| triton_onnx/grpc/tensor | 2400.0 ‡ |" in md  # p50 by batch, poisson at 60 req/s
    assert "| triton_onnx/grpc/tensor | 125.0 | 200.0 † | 1.60× † |" in md  # a ratio carries both trials' marks
    assert "| a100 | pytorch/http/tensor | 1 | c1 † | 10.0 |" in md  # the frontier marks its unstable rows ...
    assert "2 of 4 points." in md  # ... and counts them
    assert "| triton_onnx/grpc/tensor | 8 | poisson-r60 | 60.0 | 60.2 | 60.2 | 440.0 |" in md  # offered vs served
    assert "| 0.990 | yes ‡ | yes |" in md and "| 1.010 | no | yes |" in md
    assert ("**Server and clients disagree** on the images served (by more than 5%) in 1 trial(s), "
            "server/client: triton_onnx/grpc/tensor/b1/c4 (1.120)") in md
    assert {p.name for p in published.folder.glob("*.png")} == {
        "pareto.png", "cost_per_1k.png", "latency_vs_throughput_a100.png"}
    assert all(p.stat().st_size > 10_000 for p in published.folder.glob("*.png"))


def test_the_clients_cost_per_request_is_shown_beside_p50(flagged) -> None:
    md = flagged[2].markdown.read_text()
    assert "## Client cost per request" in md
    assert "| triton_onnx/grpc/tensor | 1 | c1 | 310 | 0.42 | 8.00 |" in md


def test_figures_measured_by_another_load_engine_are_marked_wherever_they_appear() -> None:
    """The compiled engine measured most trials; a shared-memory trial (only the Python client speaks it) is marked
    §, and so is any ratio or table cell it takes part in; a report of one engine (or of runs that predate the
    param: all Python) marks nothing."""
    from experiments.report import marks
    from experiments.report.data import tidy_trials

    def runs(engines: list[str | None]) -> pd.DataFrame:
        rows = []
        for i, engine in enumerate(engines):
            rows.append({"run_id": f"r{i}", "start_time": pd.Timestamp(2026, 11, 25, 10, i), "tags.status": "ok",
                         "params.gpu_tier": "local", "params.backend": "triton_onnx",
                         "params.backend_variant": "triton_onnx", "params.protocol": ["http", "grpc", "http_shm"][i],
                         "params.input_format": "tensor", "params.batch_size": "1", "params.concurrency": "1",
                         "params.load_engine": engine, "metrics.latency_p50_ms": 1.0 + i,
                         "metrics.throughput_img_s": 100.0, "tags.trial_key": f"k{i}"})
        return pd.DataFrame(rows)

    trials, _ = tidy_trials(runs(["compiled", "compiled", "python"]))
    by_protocol = trials.set_index("protocol")["marks"]
    assert by_protocol["http_shm"] == marks.OTHER_ENGINE and by_protocol["http"] == by_protocol["grpc"] == ""
    assert marks.merge(by_protocol[["http"]], by_protocol[["http_shm"]].set_axis(["http"])).iloc[0] == "§"
    legend = marks.legend(trials["marks"])
    assert legend == ("§ measured by another load engine than the other figures (`load_engine`): compare it with "
                      "figures of its own engine: 1 of 3 figures.")
    for same in (["compiled"] * 3, [None, None, "python"]):
        assert (tidy_trials(runs(same))[0]["marks"] == "").all()


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The markdown reports of the two synthetic sweeps of trials measured 3 times (tests/synthetic_sweep.py
    REPEATED): the runner-up within noise of the pick, and clear of it."""
    folder = tmp_path_factory.mktemp("repeats")
    uri = premigrated_store(folder)
    syn.build_repeats(uri)
    syn.build_repeats(uri, apart=True)
    return {sweep: make_report(uri, "tierbench", sweep, folder / "runs", ReportOptions(slo_p99_ms=300.0))
            .markdown.read_text() for sweep in (syn.REPEATS_SWEEP_ID, syn.REPEATS_APART_SWEEP_ID)}


def test_repeated_trials_show_their_intervals_and_the_runner_up_within_noise(repeated) -> None:
    md = repeated[syn.REPEATS_SWEEP_ID]
    assert "2 trial(s) were measured 3 times each (`experiment.repeats`)" in md
    assert ("**a100 · triton_onnx/grpc/tensor · b8 · c4**: **$0.00025 per 1k images** (95 % interval "
            "$0.000238–$0.000263) (p99 120.0 ms" in md)
    assert ("Within noise: the runner-up, **rtx4090 · triton_onnx/grpc/tensor · b8 · c4**, at $0.000263 per 1k "
            "images (95 % interval $0.000238–$0.000294), overlaps the pick's interval ($0.000238–$0.000263): tier "
            "rtx4090 is within noise of tier a100." in md)
    assert "| $0.00025 ($0.000238–$0.000263) | $0.000263 ($0.000238–$0.000294) |" in md  # across tiers
    assert "spot $0.18/h (spot, Synthetic, seen 2026-01-01): **$0.000125 per 1k images** (95 % interval " in md
    pareto = md.split("## Pareto frontier")[1].split("\n## ")[0]
    assert "| 120.0 (108.0–132.0) | 80.0 (76.0–84.0) | 400.0 (380.0–420.0) | $0.00025 ($0.000238–$0.000263) |" in pareto
    a100 = md.split("\n## Tier a100\n")[1]
    assert "$0.000125 ($0.000119–$0.000132)" in a100, "at the spot price, from the throughput's interval"
    assert "| 400.0 (380.0–420.0) |" in a100.split("Throughput (img/s) by batch size")[1].split("\n## ")[0]


def test_a_runner_up_clear_of_the_picks_interval_is_not_called_noise(repeated) -> None:
    md = repeated[syn.REPEATS_APART_SWEEP_ID]
    assert ("Beyond noise: the runner-up, **rtx4090 · triton_onnx/grpc/tensor · b8 · c4**, at $0.000333 per 1k "
            "images (95 % interval $0.000323–$0.000345), is clear of the pick's interval ($0.000238–$0.000263)." in md)
    assert "within noise" not in md.lower()


def test_trials_measured_once_have_no_intervals_and_no_noise_verdict(published) -> None:
    md = published.markdown.read_text()
    assert "95 % interval" not in md and "noise" not in md.lower() and "`experiment.repeats`" not in md


def test_a_point_that_completed_nothing_in_its_window_has_no_cost_bar_and_breaks_nothing(data, tmp_path) -> None:
    """On a starved node a 1 s window can end before its only request does: an ok trial at 0 img/s, no cost. Its
    stack gets no bar; the others keep theirs."""
    from experiments.report import plots

    starved = data.ok.iloc[[0]].assign(stack="torchserve/http/jpeg", throughput_img_s=0.0,
                                       cost_per_1k_images_usd=float("nan"))
    path = plots.cost_bars(pd.concat([data.ok, starved]), _prices(data), {}, tmp_path / "cost_per_1k.png")
    assert path.stat().st_size > 0
