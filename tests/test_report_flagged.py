"""The report on the FLAGGED synthetic sweep (tests/synthetic_sweep.py FLAGGED): open-loop rates as points of their
own; overloaded, unstable and stalled trials left out of the answer or marked in every table and plot; the clients'
cost per request; and figures measured by another load engine, marked wherever they appear."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.report import tables
from experiments.report.build import ReportOptions
from experiments.report.publish import make_report
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store, tier_prices


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
    return answer_lines(data, labels, tier_prices(data), slo, lambda row: str(row["price"]))


def test_open_loop_rates_are_points_of_their_own(flagged) -> None:
    data = flagged[2].data
    assert list(data.ok["load"].cat.categories) == ["c1", "c4", "poisson-r60", "poisson-r100"]
    over = data.ok[data.ok["overloaded"]]
    assert list(over["load"]) == ["poisson-r60"] * 2 and set(over["marks"]) == {"‡"}


def test_an_overloaded_trial_is_never_the_answer_nor_on_the_frontier(flagged) -> None:
    uri, ids, published = flagged
    data = published.data
    overloaded = data.ok[data.ok["overloaded"] & ~data.ok["client_behind"]].index[0]
    # Counted in, the overloaded trial would be the cheapest point and on the frontier ...
    assert tables.slo_pick(tables.priced_points(data.ok, tier_prices(data)), 10_000)["load"] == "poisson-r60"
    assert overloaded in tables.pareto_frontier(data.ok).index
    # ... but it is not what the server sustained: left out of the answer at any target and of the frontier.
    assert overloaded not in data.sustained.index and overloaded not in tables.pareto_frontier(data.sustained).index
    for slo in (None, 10_000.0):
        assert "b8 · c4**: **$0.00025 per 1k images**" in _answer(data, slo)[0]
    md = published.markdown.read_text()
    assert ("2 open-loop trial(s) fell behind their arrivals (‡) and are left out of the answer, the Pareto frontier "
            "and every cost figure: see “Overloaded trials”. In 1 of them the client fell behind its own schedule: "
            "what those served is a lower bound on the server's capacity.") in md
    assert "# Overloaded trials" in md
    assert ("| a100 | triton_onnx/grpc/tensor | 8 | poisson-r60 | 60.2 | 55.0 | 440.0 | 31 | 2400.0 | "
            "60.2 req/s arrived, 55.0 served: 31 more requests waiting at the end |") in md
    frontier = md[md.index("Pareto frontier: p99"):md.index("![p99 latency")]
    assert "poisson-r60" not in frontier
    run = MlflowClient(uri).get_run(ids["sweep_run"])
    assert run.data.metrics["min_cost_per_1k_images_usd"] == pytest.approx(0.1 / 400)  # not 0.1 / 440
    assert run.data.metrics["trials_overloaded"] == 2 and run.data.metrics["trials_unstable"] == 2


def test_an_overload_the_client_caused_is_named_as_the_clients(flagged) -> None:
    """Both overloaded trials are left out alike; the one whose client fell behind its schedule says so, with the
    figures that show it, and the one whose client kept its schedule does not."""
    md = flagged[2].markdown.read_text()
    section = md[md.index("# Overloaded trials"):]
    section = section[:section.index("\n#", 3)]
    assert ("| a100 | triton_onnx/http/tensor | 1 | poisson-r60 | 60.1 | 40.0 | 40.0 | 57 | 900.0 | "
            "60.1 req/s arrived, 40.0 served: 57 more requests waiting at the end; the client fell behind its "
            "schedule (62% sent late, its timer p99 140 ms late) |") in section
    assert section.count("the client fell behind its schedule (") == 1
    assert "of the arrivals sent late while its own timer ran p99 10 ms late or more" in section


def test_a_node_busy_before_the_sweep_is_named_in_the_answer_and_its_tier(flagged) -> None:
    md = flagged[2].markdown.read_text()
    assert ("Tier a100's node had 1.9 of its 2 cores busy before the sweep started anything on it: its figures "
            "include that work.") in "\n".join(flagged[2].report.summary)
    tier = md[md.index("# Tier a100"):]
    assert "**Busy node**: 1.9 of its 2 cores were busy before this tier's job started anything on it." in tier


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
    assert "| triton_onnx/grpc/tensor | — | 2400.0 ‡ |" in md  # p50 by batch, poisson at 60 req/s
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
    """The compiled engine measured most trials; a trial the Python client measured (a TLS endpoint, say) is marked
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
