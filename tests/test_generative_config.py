"""A generative sweep's config (experiment.workload=generative): what is refused before anything starts, each refusal
naming the key and the fix; and image sweeps untouched by workloads: the same trial keys as before (fast, no
server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from experiments.plan import plan_trials
from experiments.run.trial import new_record
from serving.workloads.generative.tiny_model import write_tiny_llama
from tests.helpers import CPU_NODE

URL = "backends.openai.url=http://10.0.0.5:8000"
GENERATIVE = ["experiment=generative", "model=tiny_llama", URL]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        validate(load_config([*GENERATIVE, *overrides]))
    return str(info.value)


def test_a_generative_sweep_of_the_tiny_model_is_accepted_and_planned(tiny_llama: Path) -> None:
    cfg = load_config([*GENERATIVE, f"model.tokenizer={tiny_llama}"])
    validate(cfg)
    trials = [t for group in plan_trials(cfg) for t in group.trials]
    assert [t.name for t in trials] == [f"local/openai/http/chat_stream/b1/c{c}" for c in (1, 8, 64)]
    record = new_record(cfg, trials[0], CPU_NODE)
    assert record.params["workload"] == "generative" and record.params["model_tokenizer"] == str(tiny_llama)
    assert record.params["input_tokens"] == "128" and record.params["output_tokens"] == "64"
    # another length is another trial
    other = new_record(load_config([*GENERATIVE, f"model.tokenizer={tiny_llama}",
                                    "experiment.prompts.output_tokens.mean=32"]), trials[0], CPU_NODE)
    assert other.key != record.key


def test_a_model_of_another_workload_is_refused_naming_both() -> None:
    message = refusal("model=resnet18")
    assert "model='resnet18'" in message and "is an image model" in message and "model=tiny_llama" in message
    with pytest.raises(ConfigError, match="experiment.workload=image measures images"):
        validate(load_config(["model=tiny_llama"]))


@pytest.mark.parametrize(("override", "expected"), [
    ("experiment.input_formats=[tensor]", "experiment.input_formats='tensor' is not allowed: a generative sweep "
                                          "sends ['chat_stream', 'completions_stream', 'chat', 'completions']"),
    ("experiment.batch_sizes=[1,8]", "experiment.batch_sizes=[1, 8] is not allowed: a generative request is one "
                                     "conversation: [1]"),
    ("experiment.slo.p99_ms=50", "experiment.slo.p99_ms=50.0 is not allowed: say which latency: "
                                 "experiment.slo.ttft_p99_ms"),
    ("experiment.load_engine=compiled", "experiment.load_engine='compiled' is not allowed: the compiled engine "
                                        "records no token"),
    ("experiment.backends=[endpoint]", "experiment.backends='endpoint' is not allowed: backends.endpoint "
                                       "(endpoint, kind=oip) does not serve generative requests"),
    ("experiment.slo.ttft_p99_ms=-1", "experiment.slo.ttft_p99_ms=-1.0 is not allowed: a target in ms > 0"),
    ("experiment.prompts.input_tokens.distribution=beta", "experiment.prompts.input_tokens.distribution='beta' "
                                                          "is not allowed"),
    ("experiment.prompts.turns=0", "experiment.prompts.turns=0 is not allowed"),
    ("experiment.accuracy.max_top1_drop=1", "experiment.accuracy.max_top1_drop=1.0 is not allowed: it belongs to "
                                            "image sweeps"),
    ("backends.openai.pin_output=always", "backends.openai.pin_output='always' is not allowed"),
    ("backends.openai.grpc_url=10.0.0.5:8001", "backends.openai.grpc_url='10.0.0.5:8001' is not allowed: null with "
                                               "kind=openai"),
])
def test_bad_input_is_refused_naming_the_key_and_the_fix(override: str, expected: str) -> None:
    assert expected in refusal(override)


def test_an_image_sweep_refuses_the_generative_targets() -> None:
    with pytest.raises(ConfigError, match="experiment.slo.ttft_p99_ms=200.0 is not allowed: a target of generative"):
        validate(load_config(["experiment.slo.ttft_p99_ms=200"]))


def test_a_tokenizer_folder_that_does_not_load_is_refused(tmp_path: Path) -> None:
    message = refusal(f"model.tokenizer={tmp_path / 'nowhere'}")
    assert "model.tokenizer=" in message and "nowhere" in message
    (tmp_path / "empty").mkdir()
    assert "model.tokenizer=" in refusal(f"model.tokenizer={tmp_path / 'empty'}")


def test_lengths_past_the_models_context_are_refused(tiny_llama: Path) -> None:
    message = refusal(f"model.tokenizer={tiny_llama}", "experiment.prompts.input_tokens.mean=2000",
                      "experiment.prompts.output_tokens.mean=100")
    assert "experiment.prompts" in message and "2048" in message
    message = refusal("experiment.prompts.output_tokens.mean=3000")  # no tokenizer: model.context_tokens
    assert "2048" in message


def test_image_trials_keep_the_keys_they_had_before_workloads() -> None:
    """Every trial of three image experiments hashes as it did before generative text joined (recorded then)."""
    recorded = json.loads((Path(__file__).parent / "data" / "image_trial_keys.json").read_text())
    found = {}
    for overrides in (["experiment=quick"], ["experiment=endpoint", "backends.endpoint.url=http://10.0.0.5:8000"],
                      ["experiment=protocol_5way"]):
        cfg = load_config([*overrides, "sweep_id=x"])
        for group in plan_trials(cfg):
            for trial in group.trials:
                found[f"{trial.name}|{overrides[0]}"] = new_record(cfg, trial, CPU_NODE).key
    assert found == recorded


def test_the_token_capacity_plan_takes_a_peak_in_requests_per_second() -> None:
    validate(load_config([*GENERATIVE, "capacity.peak_rps=20"]))
    assert "capacity.peak_rps=-1.0 is not allowed" in refusal("capacity.peak_rps=-1")
    assert "capacity.traffic_img_s=100.0 is not allowed: a generative sweep's plan" in refusal(
        "capacity.traffic_img_s=100")
    with pytest.raises(ConfigError, match="capacity.peak_rps=5.0 is not allowed: a generative sweep's peak"):
        validate(load_config(["capacity.peak_rps=5"]))
