"""Generative sweeps end to end, as a user runs them: one sweep (shared by the tests that read it) measures the
stand-in (set TTFT and ITL, exact token counts), a stand-in that cuts every third stream, and `transformers serve`
on the tiny random-weight Llama, each through the openai endpoint kind, and the report answers in tokens. The
endpoint's checks before any trial (the model listed, the output length pinned) are tested on their own (slow:
they start servers, Ray and MLflow)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.run.server_group import build_backend
from serving.endpoint.probe import EndpointError
from serving.workloads.generative.standin import StandIn
from tests.generative_servers import STANDIN_TTFT_MS, TransformersServe
from tests.helpers import CPU_NODE, runs, store_overrides, store_uri
from tests.sweep_process import run_sweep_command

pytest_plugins = ["tests.generative_servers"]
pytestmark = pytest.mark.slow

BASE = ["experiment=generative", "model=tiny_llama", "experiment.window_s=1.0", "experiment.warmup_s=0.3",
        "experiment.warmup_requests=4", "experiment.stability.windows=1", "experiment.stability.max_windows=1",
        "experiment.stability.min_requests=0", "experiment.prompts.input_tokens.mean=24",
        "experiment.prompts.output_tokens.mean=12", "experiment.prompts.conversations=16"]


def _backend(*overrides: str):
    cfg = load_config([*BASE, *overrides])
    return build_backend(cfg, "openai", CPU_NODE, {})


def test_the_endpoint_check_names_the_models_the_server_lists(standin: StandIn) -> None:
    backend = _backend(f"backends.openai.url={standin.url}", "model.name=not-served")
    with pytest.raises(EndpointError) as info:
        backend.start()
    message = str(info.value)
    assert "backends.openai.model_name='not-served'" in message and "'standin'" in message


def test_the_output_length_is_pinned_the_way_the_server_takes(standin: StandIn, tmp_path: Path) -> None:
    handle = _backend(f"backends.openai.url={standin.url}", "backends.openai.model_name=standin").start()
    assert handle.params["endpoint_pin_output"] == "ignore_eos" and handle.params["endpoint_stream_usage"] is True
    with StandIn(model="strict", strict_fields=True, log_path=tmp_path / "strict.log") as strict:
        handle = _backend(f"backends.openai.url={strict.url}", "backends.openai.model_name=strict").start()
        assert handle.params["endpoint_pin_output"] == "none"
        with pytest.raises(EndpointError, match="pin_output=ignore_eos.*|did not answer a 2-token request"):
            _backend(f"backends.openai.url={strict.url}", "backends.openai.model_name=strict",
                     "backends.openai.pin_output=ignore_eos").start()


@pytest.fixture(scope="module")
def sweep(standin: StandIn, tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One sweep of three endpoints: the stand-in (streamed chat and completions, chat answered whole), a stand-in
    cutting every third stream, and `transformers serve`, at 2 conversations in flight, one window each, with TTFT and
    TPOT targets; its records by trial name, the store, and its output."""
    tmp = tmp_path_factory.mktemp("generative-sweep")
    with StandIn(model="cutting", cut_after=3, fail_every=3, log_path=tmp / "cutting.log") as cutting, \
            TransformersServe(tiny_llama_dir, log_path=tmp / "serve.log") as served:
        args = [*BASE, *store_overrides(tmp, "gen", premigrated=True), f"model.tokenizer={tiny_llama_dir}",
                f"backends.openai.url={standin.url}", "backends.openai.model_name=standin",
                "+backend@backends.cutting=endpoint", "backends.cutting.kind=openai",
                f"backends.cutting.url={cutting.url}", "backends.cutting.model_name=cutting",
                "+backend@backends.served=endpoint", "backends.served.kind=openai",
                f"backends.served.url={served.url}", f"backends.served.model_name={served.model}",
                "experiment.backends=[openai,cutting,served]",
                "experiment.input_formats=[chat_stream,completions_stream,chat]",
                "experiment.stacks=[openai/http/chat_stream,openai/http/completions_stream,openai/http/chat,"
                "cutting/http/chat_stream,served/http/chat_stream]",
                "experiment.concurrency=[2]", "experiment.max_error_rate=0.5",
                "experiment.slo.ttft_p99_ms=1000", "experiment.slo.tpot_p99_ms=500",
                # the SLO search's highest load is the grid's: each point's summary, no probe of its own
                "experiment.slo.max_concurrency=2", "report=true"]
        proc, _ = run_sweep_command(args, timeout=600)
    records = {}
    for path in sorted((tmp / "runs" / "gen").glob("*/trials/*/record.json")):
        record = json.loads(path.read_text())
        records[record["run_name"] if record.get("run_name") else record["trial"]["variant"] + "/"
                + record["trial"]["input_format"] + f"/c{record['trial']['concurrency']}"] = record
    yield {"proc": proc, "records": records, "store": store_uri(tmp), "tmp": tmp}


def _trial(sweep: dict, variant: str, input_format: str, concurrency: int) -> dict:
    for record in sweep["records"].values():
        trial = record["trial"]
        if (trial["variant"], trial["input_format"], trial["concurrency"]) == (variant, input_format, concurrency):
            return record
    raise AssertionError(f"no trial {variant}/{input_format}/c{concurrency}: {sorted(sweep['records'])}\n"
                         f"{sweep['proc'].stdout[-3000:]}{sweep['proc'].stderr[-3000:]}")


def test_the_sweep_measures_every_trial_and_answers_in_tokens(sweep: dict) -> None:
    proc = sweep["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    levels = {name: r["tags"].get("run_level", "trial") for name, r in sweep["records"].items()}
    trials = [r for name, r in sweep["records"].items() if levels[name] == "trial" and "phase" not in r["tags"]]
    assert len(trials) == 5 and all(r["status"] == "ok" for r in trials)
    summaries = [r for name, r in sweep["records"].items() if levels[name] == "slo"]
    assert len(summaries) == 5, levels
    # an answer asked whole has no TTFT or TPOT to hold to the targets: its search is skipped, saying why
    (whole,) = [r for r in summaries if r["trial"]["input_format"] == "chat"]
    assert whole["status"] == "skipped" and "TTFT" in whole["reason"] and not whole["metrics"], whole
    standin = next(r for r in summaries if r["trial"]["variant"] == "openai"
                   and r["trial"]["input_format"] == "chat_stream")
    assert standin["metrics"]["slo_max_load"] == 2 and standin["metrics"]["slo_max_output_tokens_s"] > 0
    assert standin["metrics"]["slo_ttft_p99_ms"] == 1000 and standin["metrics"]["slo_tpot_p99_ms"] == 500
    assert "$" in proc.stdout and "1M" in proc.stdout and "token" in proc.stdout
    assert "img" not in proc.stdout.split("tierbench report", 1)[-1]


def test_the_standins_tokens_are_counted_exactly_and_its_first_token_no_sooner_than_set(sweep: dict) -> None:
    for input_format in ("chat_stream", "completions_stream"):
        for concurrency in (2,):
            record = _trial(sweep, "openai", input_format, concurrency)
            m, params = record["metrics"], record["params"]
            assert (m["output_tokens_mean"], m["output_tokens_min"], m["requested_tokens_mean"]) == (12, 12, 12)
            assert m["tokens_per_event_mean"] == 1.0 and m["output_short_share"] == 0.0
            assert params["tokens_counted_by"] == "usage" and params["endpoint_pin_output"] == "ignore_eos"
            # the stand-in writes its first token 40 ms after it read the request: none can come sooner
            assert m["ttft_p50_ms"] >= STANDIN_TTFT_MS and m["ttft_mean_ms"] >= STANDIN_TTFT_MS
            assert m["output_tokens_s"] > 0 and m["cost_per_1m_output_tokens_usd"] > 0
            assert m["goodput_share"] == pytest.approx(1.0) and "throughput_img_s" not in m


def test_an_answer_asked_whole_has_its_tokens_but_no_token_timing(sweep: dict) -> None:
    m = _trial(sweep, "openai", "chat", 2)["metrics"]
    assert m["output_tokens_mean"] == 12 and m["output_tokens_s"] > 0
    assert not any(k.startswith(("ttft_", "itl_", "tpot_")) for k in m)


def test_a_stream_cut_mid_way_is_a_failed_request_and_the_trial_goes_on(sweep: dict) -> None:
    record = _trial(sweep, "cutting", "chat_stream", 2)
    m = record["metrics"]
    assert record["status"] == "ok" and 0.2 < m["error_rate_truncated"] < 0.5
    assert m["error_rate"] == m["error_rate_truncated"] and "stream was cut" in record["params"]["first_errors"]


def test_transformers_serve_is_measured_with_its_own_usage_and_no_pinned_length(sweep: dict) -> None:
    for concurrency in (2,):
        record = _trial(sweep, "served", "chat_stream", concurrency)
        m, params = record["metrics"], record["params"]
        assert params["endpoint_pin_output"] == "none" and params["tokens_counted_by"] == "usage"
        assert params["endpoint_platform"].startswith("OpenAI-compatible")
        assert 1 <= m["output_tokens_mean"] <= 12 and m["ttft_p50_ms"] > 0 and m["output_tokens_s"] > 0


def test_the_trials_are_in_mlflow_with_the_workloads_params(sweep: dict) -> None:
    found = [run for run in runs(sweep["store"], sweep_id="gen") if "phase" not in run.data.tags]
    assert len(found) == 5
    assert {run.data.params["workload"] for run in found} == {"generative"}
    assert all(run.data.metrics["cost_per_1m_output_tokens_usd"] > 0 for run in found)
