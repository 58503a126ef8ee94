"""Accuracy on a labelled corpus (experiment.inputs.labels) and the bound that keeps a less accurate variant from
being chosen (experiment.accuracy.max_top1_drop): a classifier trained here in seconds, served by Ray Serve and
Triton, each path scored on held-out labelled images against an in-process evaluation of the same model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.report.build import ReportOptions, build_report
from experiments.report.data import SweepData, load_sweep
from tests import labelled_task
from tests.helpers import runs, store_overrides, store_uri
from tests.sweep_process import run_sweep_command

SHORT = ["experiment.backends=[pytorch,triton_onnx]", "experiment.protocols=[http]",
         "experiment.input_formats=[tensor,jpeg]", "experiment.batch_sizes=[1]", "experiment.concurrency=[1]",
         "experiment.window_s=0.5", "experiment.stability.windows=1", "experiment.stability.max_windows=1",
         "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "quiet=true", "sweep_id=accuracy"]


@pytest.mark.slow
def test_every_fp32_path_scores_what_the_model_scores_in_process(tmp_path: Path) -> None:
    net = labelled_task.train()
    model = labelled_task.torchscript(net, tmp_path / "colours.ts")
    folder, labels_csv, labels = labelled_task.labelled_folder(tmp_path / "images")
    expected = labelled_task.in_process_top1(net, folder, labels)
    assert 0.5 < expected < 0.95  # a real number: the task is learnable and not solved
    proc, _ = run_sweep_command([*store_overrides(tmp_path, premigrated=True), *labelled_task.MODEL,
                                 f"model.path={model}", f"experiment.inputs.source={folder}",
                                 f"experiment.inputs.labels={labels_csv}", "experiment.accuracy.max_top1_drop=1.0",
                                 *SHORT], timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    trials = runs(store_uri(tmp_path))
    assert len(trials) == 4
    for run in trials:
        m, name = run.data.metrics, run.info.run_name
        assert run.data.tags["status"] == "ok", run.data.tags.get("reason")
        assert m["accuracy_images"] == len(labels), name
        # within half a point of the in-process evaluation (here: the same images right, every one)
        assert abs(m["accuracy_top1"] - expected) <= 0.005 and abs(m["reference_top1"] - expected) <= 0.005, name
        assert m["accuracy_top5"] == 1.0 and abs(m["top1_drop"]) <= 0.5, name  # three classes: all in the top 5
        assert run.data.params["max_top1_drop"] == "1.0" and run.data.params["inputs"] == str(folder), name
    text = build_report(load_sweep(store_uri(tmp_path), "tierbench", "accuracy"), tmp_path / "report",
                        ReportOptions()).document.to_markdown()
    section = text.split("# Accuracy")[1].split("\n# ")[0]
    assert f"{100 * expected:.1f} %" in section and "over the bound" not in section


def test_a_variant_over_the_bound_is_shown_and_never_chosen() -> None:
    """Two stacks, the cheaper one 3 points of top-1 down against a bound of 1: only the other may be chosen."""
    rows = pd.DataFrame({"status": ["ok", "ok"], "overloaded": [False, False], "stack": ["int8", "fp32"],
                         "top1_drop": [3.0, 0.0], "max_top1_drop": ["1.0", "1.0"],
                         "cost_per_1k_images_usd": [0.01, 0.02]})
    rows["over_accuracy_bound"] = rows["top1_drop"] > pd.to_numeric(rows["max_top1_drop"])
    data = SweepData("s", "0", None, rows, {})
    assert list(data.ok["stack"]) == ["int8", "fp32"] and list(data.sustained["stack"]) == ["fp32"]
