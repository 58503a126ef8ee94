"""The report on synthetic sweeps of trials measured 3 times (tests/synthetic_sweep.py REPEATED): each figure's 95 %
interval in the answer and the tables, and the runner-up said to be within noise of the pick, or clear of it."""

from __future__ import annotations

import pytest

from experiments.report.build import ReportOptions
from experiments.report.publish import make_report
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store


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
