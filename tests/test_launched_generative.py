"""A generative server tierbench launches, end to end as a user runs it: transformers behind Ray Serve on the tiny
random-weight Llama (`experiment=generative_launched`), its engine timed in-process before it starts, every token
measured, each trial set against the engine at the batch the server really generated, with a verdict (slow: it
starts Ray, Serve and MLflow; the suite's leak check finds any replica left running)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import store_overrides
from tests.sweep_process import run_sweep_command

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("launched")
    args = ["experiment=generative_launched", *store_overrides(tmp, "launched", premigrated=True),
            "experiment.backends=[serve_transformers_when_free]", "experiment.concurrency=[1,3]",
            "experiment.window_s=1.0", "experiment.warmup_s=0.3", "experiment.warmup_requests=4",
            "experiment.stability.windows=1", "experiment.stability.max_windows=1",
            "experiment.stability.min_requests=0", "experiment.prompts.input_tokens.mean=24",
            "experiment.prompts.output_tokens.mean=12", "experiment.prompts.conversations=16"]
    proc, _ = run_sweep_command(args, timeout=600)
    folder = tmp / "runs" / "launched" / "local"
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("trials/*/record.json"))]
    return {"proc": proc, "records": {r["trial"]["concurrency"]: r for r in records}, "folder": folder}


def test_the_launched_server_is_measured_per_token_against_its_engine(sweep: dict) -> None:
    proc = sweep["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ceiling = json.loads((sweep["folder"] / "ceiling.json").read_text())
    (key, points), = ceiling["points"].items()
    assert ceiling["kind"] == "tokens" and key == "transformers/cpu/dtype=float32" and set(points) >= {"1", "2", "3"}
    assert all(value > 0 for value in points.values())
    for concurrency, record in sweep["records"].items():
        m, params, tags = record["metrics"], record["params"], record["tags"]
        assert record["status"] == "ok" and params["server_mode"] == "serve_transformers"
        assert params["tokens_counted_by"] == "usage" and m["output_tokens_mean"] == 12 == m["output_tokens_min"]
        assert params["random_weights"] is True and params["server_batcher"] == "when_free"
        assert 1 <= m["server_batch_avg"] <= concurrency and m["server_generating_tokens_s"] > 0
        assert m["ceiling_batch"] == m["server_batch_avg"] and params["ceiling_runtime"] == key
        assert m["ceiling_share"] == pytest.approx(m["output_tokens_s"] / m["ceiling_output_tokens_s"])
        assert tags["bottleneck"] and tags["bottleneck_evidence"] and tags["bottleneck_fix"]

