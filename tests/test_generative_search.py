"""The SLO search and the settings search for tokens: a generative probe meets its TTFT and TPOT p99 targets or misses,
the same doubling and bisection finds the highest load within both, its summary is named in output tokens (the image
names unchanged), bad targets and spaces are refused before anything starts, the report says what to deploy, and
`experiment=cheapest_generative` end to end (slow: it starts Ray, Serve and MLflow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.config.choices import SloRange
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.experiment import SloConfig
from experiments.config.search import space_of
from experiments.config.validation import validate
from experiments.measure.catalog import undeclared
from experiments.measure.slo_names import SloNames
from experiments.report.data import SweepData
from experiments.report.generative.deploy import deploy_lines
from experiments.run.slo import SloProbe, SloResult, SloTargets, search_slo
from serving.workloads.registry import workload

GENERATIVE = workload("generative")
TOKENS = SloNames.of(GENERATIVE)
CLOSED = SloRange(1, 1, 64, True)
TARGETS = SloTargets.of(SloConfig(ttft_p99_ms=500, tpot_p99_ms=50), GENERATIVE)


def _probe(load: float, ttft_ms: float, tpot_ms: float, tokens_s: float = 100.0, **kw) -> SloProbe:
    return SloProbe(load, p99_ms=ttft_ms + 16 * tpot_ms, throughput=tokens_s,
                    figures={"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}, **kw)


def test_a_generative_probe_meets_only_within_both_its_ttft_and_tpot_targets() -> None:
    assert TARGETS.bounds == (("ttft_p99_ms", 500), ("tpot_p99_ms", 50))
    assert _probe(1, 499.0, 49.0).meets(TARGETS)
    assert not _probe(1, 501.0, 10.0).meets(TARGETS), "TTFT missed"
    assert not _probe(1, 10.0, 51.0).meets(TARGETS), "TPOT missed"
    assert not _probe(1, 10.0, 10.0, overloaded=True).meets(TARGETS)
    unstreamed = SloProbe(1, p99_ms=10.0, throughput=100.0)  # an answer not streamed: no TTFT, no TPOT
    assert not unstreamed.meets(TARGETS)
    # one target alone bounds only its own figure
    ttft_only = SloTargets.of(SloConfig(ttft_p99_ms=500), GENERATIVE)
    assert ttft_only.bounds == (("ttft_p99_ms", 500),) and _probe(1, 100.0, 999.0).meets(ttft_only)
    # the goodput rule, where set, on top of both
    ruled = SloTargets.of(SloConfig(ttft_p99_ms=500, tpot_p99_ms=50, min_goodput_share=0.99), GENERATIVE)
    assert _probe(1, 10.0, 10.0, goodput_share=0.995).meets(ruled)
    assert not _probe(1, 10.0, 10.0, goodput_share=0.9).meets(ruled) and not _probe(1, 10.0, 10.0).meets(ruled)
    # an image sweep's targets are its p99 alone; the generative keys are not its
    assert SloTargets.of(SloConfig(p99_ms=50, ttft_p99_ms=500), workload("image")).bounds == (("p99_ms", 50),)


def _server(load: float) -> SloProbe:
    """TTFT grows with the queue (crosses 500 ms past 12 in flight), TPOT with the batch (crosses 50 ms past 20)."""
    return _probe(load, ttft_ms=40.0 * load, tpot_ms=2.5 * load, tokens_s=min(load, 16) * 30.0)


def test_the_search_finds_the_highest_load_within_ttft_and_tpot_with_the_same_doubling_and_bisection() -> None:
    calls: list[float] = []
    result = search_slo(lambda c: calls.append(c) or _server(c), TARGETS, CLOSED, names=TOKENS)
    assert result.best.load == 12, "TTFT is the binding target"
    assert calls == [1, 2, 4, 8, 16, 12, 14, 13], "doubling to the first miss, then bisection"
    # TPOT binds where TTFT is looser; known loads are reused, not measured again
    loose = SloTargets.of(SloConfig(ttft_p99_ms=5000, tpot_p99_ms=50), GENERATIVE)
    calls.clear()
    again = search_slo(lambda c: calls.append(c) or _server(c), loose, CLOSED, known={1: _server(1), 2: _server(2)},
                       names=TOKENS)
    assert again.best.load == 20 and 1 not in calls and 2 not in calls
    # the first load already misses: halving to the floor, nothing meets
    assert search_slo(_server, SloTargets.of(SloConfig(ttft_p99_ms=10), GENERATIVE), CLOSED, names=TOKENS).best is None


def test_a_generative_summary_is_named_in_output_tokens_and_declared() -> None:
    best = _probe(12, 480.0, 30.0, tokens_s=360.0, throughput_interval=(340.0, 380.0), goodput_share=1.0,
                  goodput=350.0)
    metrics = SloResult(TARGETS, best, [best], names=TOKENS).metrics(price_per_hour_usd=3.6)
    assert metrics["slo_ttft_p99_ms"] == 500 and metrics["slo_tpot_p99_ms"] == 50 and metrics["slo_met"] == 1
    assert metrics["slo_max_output_tokens_s"] == 360.0 and metrics["slo_max_load"] == 12
    assert metrics["slo_ttft_p99_at_max_ms"] == 480.0 and metrics["slo_tpot_p99_at_max_ms"] == 30.0
    assert metrics["slo_max_goodput_output_tokens_s"] == 350.0
    assert metrics["cost_per_1m_output_tokens_at_slo_usd"] == pytest.approx(3.6 / 3600 / 360.0 * 1e6)
    assert metrics["cost_per_1m_output_tokens_at_slo_usd_ci_low"] == pytest.approx(3.6 / 3600 / 380.0 * 1e6)
    assert not [name for name in metrics if "img" in name or "images" in name or name == "slo_p99_ms"]
    assert undeclared(metrics) == [], "every figure is in the catalog (docs/metrics.md)"
    # an image summary keeps its names
    image = SloResult(50.0, SloProbe(8, 45.0, 500.0), [SloProbe(8, 45.0, 500.0)]).metrics(0.36)
    assert {"slo_p99_ms", "slo_max_throughput_img_s", "slo_p99_at_max_ms",
            "cost_per_1k_images_at_slo_usd"} <= set(image)
    assert not [name for name in image if "token" in name or "ttft" in name]


def test_an_answer_not_streamed_is_skipped_by_a_ttft_or_tpot_search_not_probed_to_its_floor() -> None:
    """`chat` and `completions` answers have no TTFT or TPOT: a search within either target could only halve their
    load to the floor, so it is not run; `chat_stream` and `completions_stream` are searched."""
    ttft_only = SloTargets.of(SloConfig(ttft_p99_ms=500), GENERATIVE)
    tpot_only = SloTargets.of(SloConfig(tpot_p99_ms=50), GENERATIVE)
    for targets in (TARGETS, ttft_only, tpot_only):
        assert targets.unmeetable(GENERATIVE, "chat_stream") is None
        assert targets.unmeetable(GENERATIVE, "completions_stream") is None
    assert TARGETS.unmeetable(GENERATIVE, "chat") == (
        "input format chat has no TTFT p99 or TPOT p99 (its requests never carry one): no load can meet TTFT p99 <= "
        "500 ms and TPOT p99 <= 50 ms, so its SLO search is skipped, not probed down to its floor; the input formats "
        "that have it: chat_stream, completions_stream")
    assert "input format completions has no TPOT p99 " in tpot_only.unmeetable(GENERATIVE, "completions")
    # an image's formats lack nothing its p99 bounds
    assert SloTargets.p99(50.0).unmeetable(workload("image"), "tensor") is None


def test_the_server_group_records_the_skipped_search_up_front_and_measures_only_the_grid(monkeypatch) -> None:
    """A sweep of streamed and whole chat answers within a TTFT target: the whole answers' search is recorded skipped,
    with its reason and no figure, before anything is measured; their grid trial is measured, the streamed point
    searched."""
    import experiments.run.server_group as server_group
    from experiments.plan import plan_trials
    from experiments.results.records import Status
    from serving.backend import ServerHandle
    from tests.helpers import CPU_NODE

    cfg = load_config(["experiment=generative", "model=tiny_llama", "backends.openai.url=http://127.0.0.1:9",
                       "experiment.input_formats=[chat_stream,chat]", "experiment.concurrency=[1]",
                       "experiment.slo.ttft_p99_ms=500", "experiment.slo.max_concurrency=8"])
    (group,) = plan_trials(cfg)
    records, measured = [], []
    server = server_group.ServerGroup(cfg, group, CPU_NODE, {}, clients=None,
                                      finish=lambda record, logs: records.append(record),
                                      save_server_file=lambda name, text: None)

    def measure(cfg, trial, *args):
        measured.append((trial.input_format, trial.load))
        record = server_group.new_record(cfg, trial, CPU_NODE)
        record.metrics = {"latency_p99_ms": 900.0, "output_tokens_s": 30.0 * trial.load, "stable": 1.0}
        if trial.input_format == "chat_stream":  # TTFT p99 100 ms a conversation in flight: 5 meet 500 ms
            record.metrics |= {"ttft_p99_ms": 100.0 * trial.load, "tpot_p99_ms": 5.0}
        return record

    server.backend.start, server.backend.stop = lambda: ServerHandle("endpoint", {}), dict
    monkeypatch.setattr(server_group, "run_trial", measure)
    server.run(group.trials)

    skipped = records[0]
    assert (skipped.status, skipped.tags["run_level"], skipped.trial.input_format) == (Status.SKIPPED, "slo", "chat")
    assert skipped.reason.startswith("input format chat has no TTFT p99 (its requests never carry one): no load can "
                                     "meet TTFT p99 <= 500 ms, so its SLO search is skipped")
    assert skipped.metrics == {} and skipped.params["slo_ttft_p99_ms"] == 500
    assert skipped.name == "local/openai/http/chat/b1/slo-ttft-p99-500ms"
    assert skipped.key == server.slo_key(group.trials[1])
    assert [load for fmt, load in measured if fmt == "chat"] == [1], "the grid's trial alone, no probe"
    assert [load for fmt, load in measured if fmt == "chat_stream"] == [1, 2, 4, 8, 6, 5]
    (searched,) = [r for r in records if r.tags.get("run_level") == "slo" and r.status == Status.OK]
    assert searched.trial.input_format == "chat_stream" and searched.metrics["slo_max_load"] == 5


# --- the config: refused before anything starts ---------------------------------------------------------------------

PRESET = ["experiment=cheapest_generative"]


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        validate(load_config([*PRESET, *overrides]))
    return str(caught.value)


def test_the_preset_searches_both_launched_servers_batching_within_ttft_and_tpot() -> None:
    cfg = load_config(PRESET)
    validate(cfg)
    exp = cfg.experiment
    assert exp.workload == "generative" and cfg.model.name == "tiny-llama"
    assert exp.slo.targets() == {"ttft_p99_ms": 500, "tpot_p99_ms": 50} and exp.concurrency == [1]
    assert space_of(cfg, "serve_transformers_when_free") == {"max_batch_size": [1, 4, 8],
                                                             "batch_wait_timeout_s": [0.0, 0.01]}
    assert space_of(cfg, "triton_stream") == {"max_batch_size": [1, 4, 8], "batch_wait_ms": [0, 10]}


def test_on_a_gpu_the_engines_own_settings_are_searched() -> None:
    cfg = load_config([*PRESET, "experiment.backends=[vllm]", "model=llama3_8b_random", "gpu=h100_sxm",
                       "+experiment.search.space.vllm={max_num_seqs: [64, 128], max_num_batched_tokens: [8192]}"])
    validate(cfg)
    assert space_of(cfg, "vllm") == {"max_num_seqs": [64, 128], "max_num_batched_tokens": [8192]}


@pytest.mark.parametrize(("overrides", "message"), [
    (["experiment.slo.ttft_p99_ms=null", "experiment.slo.tpot_p99_ms=null"],
     "experiment.slo.ttft_p99_ms=None is not allowed with experiment.search.strategy=quick: the search keeps the "
     "settings with the highest throughput within its latency targets; set experiment.slo.ttft_p99_ms and/or "
     "experiment.slo.tpot_p99_ms"),
    (["+experiment.slo.p99_ms=50"], "experiment.slo.p99_ms=50.0 is not allowed: say which latency: "
                                    "experiment.slo.ttft_p99_ms"),
    (["experiment.slo.tpot_p99_ms=0"], "experiment.slo.tpot_p99_ms=0.0 is not allowed: a target in ms > 0, or null"),
    (["experiment.slo.ttft_p99_ms=null", "experiment.slo.tpot_p99_ms=null", "experiment.search.strategy=none",
      "experiment.slo.min_goodput_share=0.99"],
     "experiment.slo.min_goodput_share=0.99 is not allowed: a rule of the SLO search: set "
     "experiment.slo.ttft_p99_ms and/or tpot_p99_ms too"),
    (["+experiment.search.space.serve_transformers.dtype=[float32]"],
     "experiment.search.space.serve_transformers.dtype is not allowed: not a setting the search varies for "
     "serve_transformers (those are ['max_batch_size', 'batch_wait_timeout_s', 'batcher', 'num_replicas'])"),
    (["experiment.search.space.triton_stream.max_batch_size=[4,0]"],
     "experiment.search.space.triton_stream.max_batch_size=[4, 0] is not allowed: the value 0 gives"),
    (["experiment.load_mode=ramp", "experiment.request_rates=[4]"],
     "experiment.slo.ttft_p99_ms=500.0 is not allowed: a ramp is one trial rising through the loads"),
    (["experiment.protocols=[http,grpc]"], "experiment.protocols=['http', 'grpc'] is not allowed with a settings "
                                           "search"),
    (["experiment.input_formats=[chat]"],
     "experiment.input_formats=[chat] is not allowed with a settings search within experiment.slo.ttft_p99_ms: its "
     "requests never have that figure, so no candidate could meet it; search a format that has it, e.g. "
     "experiment.input_formats=[chat_stream], or search without experiment.slo.ttft_p99_ms"),
    (["experiment.input_formats=[completions]", "experiment.slo.ttft_p99_ms=null"],
     "experiment.input_formats=[completions] is not allowed with a settings search within experiment.slo.tpot_p99_ms"),
])
def test_a_bad_generative_search_is_refused_naming_key_value_and_fix(overrides: list[str], message: str) -> None:
    assert message in refused(*overrides)


def test_a_generative_target_in_an_image_sweep_is_refused() -> None:
    with pytest.raises(ConfigError, match="experiment.slo.ttft_p99_ms=500.0 is not allowed: a target of generative"):
        validate(load_config(["experiment=cheapest", "model=tiny", "experiment.slo.ttft_p99_ms=500"]))


# --- the report: what to deploy -------------------------------------------------------------------------------------

def _candidate(variant: str, values: dict, tokens_s: float, cost: float, start: bool, met: bool = True) -> dict:
    return {"tier": "local", "status": "ok", "search_of": "serve_transformers_when_free", "variant": variant,
            "search_values": json.dumps(values), "search_start": str(start).lower(), "slo_met": float(met),
            "slo_ttft_p99_ms": 500.0, "slo_tpot_p99_ms": 50.0, "slo_max_load": 4.0,
            "slo_ttft_p99_at_max_ms": 180.0, "slo_tpot_p99_at_max_ms": 7.2, TOKENS.max_throughput: tokens_s,
            TOKENS.cost: cost}


def test_the_answer_names_the_winner_and_its_deploy_file() -> None:
    slo = pd.DataFrame([_candidate("stwf+max_batch_size=1", {"max_batch_size": 1}, 150.0, 0.2, start=False),
                        _candidate("stwf+max_batch_size=4", {"max_batch_size": 4}, 256.0, 0.1, start=True),
                        _candidate("stwf+max_batch_size=8", {"max_batch_size": 8}, 0.0, float("nan"), False, False)])
    data = SweepData("s", "0", None, pd.DataFrame(), {}, slo=slo,
                     deploy={("local", "serve_transformers_when_free"): ["search.json", "serve_config.yaml"]})
    (line,) = deploy_lines(data, {"local": "local (CPU)"})
    assert line.startswith("**Deploy this on local (CPU): serve_transformers_when_free (max_batch_size=4), $0.1")
    assert "within TTFT p99 ≤ 500 ms and TPOT p99 ≤ 50 ms" in line and "256" in line
    assert "`deploy/serve_transformers_when_free/serve_config.yaml`" in line
    nothing = SweepData("s", "0", None, pd.DataFrame(), {}, slo=slo.assign(slo_met=0.0))
    assert deploy_lines(nothing, {})[0].startswith("Deploy this: no searched setting met the targets")
    assert deploy_lines(SweepData("s", "0", None, pd.DataFrame(), {}), {}) == []


# --- end to end -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cheapest_generative_finds_a_winner_exports_its_file_and_the_answer_names_it(tmp_path: Path) -> None:
    """Two points of Serve's batch size on the tiny model, each searched for its highest load within the targets (up
    to 4 in flight); the winner's serve_config.yaml exported, and the report's answer naming it."""
    from tests.helpers import store_overrides, store_uri
    from tests.sweep_process import run_sweep_command

    args = ["experiment=cheapest_generative", *store_overrides(tmp_path, "gsearch", premigrated=True),
            "experiment.backends=[serve_transformers_when_free]", "experiment.search.strategy=grid",
            "experiment.search.space.serve_transformers.max_batch_size=[1,4]",
            "experiment.search.space.serve_transformers.batch_wait_timeout_s=[0.01]",
            "experiment.slo.max_concurrency=4", "ceiling.enabled=false"]
    proc, _ = run_sweep_command(args, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = tmp_path / "runs" / "gsearch" / "local"
    search = json.loads((folder / "deploy" / "serve_transformers_when_free" / "search.json").read_text())
    assert search["slo_ttft_p99_ms"] == 500 and search["slo_tpot_p99_ms"] == 50 and search["candidates_measured"] == 2
    best = search["best"]
    assert best is not None and best["slo_max_output_tokens_s"] > 0
    config = (folder / "deploy" / "serve_transformers_when_free" / "serve_config.yaml").read_text()
    assert f"max_batch_size: {best['values']['max_batch_size']}" in config
    summaries = [json.loads(p.read_text()) for p in folder.glob("trials/*/record.json")]
    summaries = [r for r in summaries if r["tags"].get("run_level") == "slo"]
    assert len(summaries) == 2 and all("cost_per_1m_output_tokens_at_slo_usd" in r["metrics"] for r in summaries
                                       if r["metrics"]["slo_met"])
    shown = subprocess.run([sys.executable, "-m", "runners.report", "gsearch", "--tracking-uri", store_uri(tmp_path),
                            "--out", str(tmp_path / "report"), "--no-log"],
                           capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent)
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    page = "\n".join(p.read_text() for p in (tmp_path / "report").rglob("*.md"))
    assert "Deploy this on local" in page and best["entry"] in page
    assert "`deploy/serve_transformers_when_free/serve_config.yaml`" in page
