"""Every config composes and validates; the documented keys and figures are where other issues expect them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import DictConfig, OmegaConf

from experiments.config.compose import CONF_DIR, load_config, options
from experiments.config.experiment import ExperimentConfig
from experiments.config.validation import validate
from experiments.plan import plan_trials
from serving.model_config import ModelConfig
from serving.paths import REPO_ROOT
from serving.workloads.generative.model import LanguageModelConfig

# Every option of every group composes and validates. Options interact through validate() only where an experiment
# meets a model of its workload (batch sizes within its max_batch_size, backend settings sized by it, prompts within
# its context): those pairs all, the other groups' options each once beside the defaults (their checks read nothing
# of the other groups). The model examples (conf/model/examples/) name files the user brings:
# tests/test_user_models.py gives them files.
# Which pairs meet is read from the options' files and the schemas they name, not composed: this runs at collection,
# on every worker (composing each option took a minute there); a pair read wrong is refused by validate() below.
BUILT_IN_MODELS = [m for m in options("model") if not m.startswith("examples/")]
MODEL_SCHEMAS = {"base_model": ModelConfig, "base_language_model": LanguageModelConfig}


def _file(group: str, option: str) -> DictConfig:
    return OmegaConf.load(CONF_DIR / group / f"{option}.yaml")


MODEL_WORKLOAD = {m: next(MODEL_SCHEMAS[d] for d in _file("model", m).defaults if d in MODEL_SCHEMAS).workload
                  for m in BUILT_IN_MODELS}
EXPERIMENT_WORKLOAD = {e: _file("experiment", e).get("workload", ExperimentConfig.workload)
                       for e in options("experiment")}
IMAGE_MODELS = [m for m in BUILT_IN_MODELS if MODEL_WORKLOAD[m] == "image"]
# A language model a launched server can load names weights or an architecture; one that names neither meets only
# experiments of servers someone else runs (the entries of conf/backends/endpoint.yaml).
ENDPOINTS = {str(d).split("@")[1] for d in _file("backends", "endpoint").defaults if "@" in str(d)}
LOADABLE = {m for m in BUILT_IN_MODELS if MODEL_WORKLOAD[m] != "generative"
            or _file("model", m).get("architecture") or _file("model", m).get("weights")}
LAUNCHES = {e for e in options("experiment")
            if set(_file("experiment", e).get("backends") or ()) - ENDPOINTS}
CASES = [*(dict(experiment=e, model=m) for e in options("experiment") for m in BUILT_IN_MODELS
           if MODEL_WORKLOAD[m] == EXPERIMENT_WORKLOAD[e] and (m in LOADABLE or e not in LAUNCHES)),
         *(dict(gpu=g) for g in options("gpu")), *(dict(cluster=c) for c in options("cluster"))]


# What an option needs from the user besides (an endpoint's URL: tests/test_endpoint.py refuses it missing).
NEEDS = {"endpoint": ["backends.endpoint.url=http://10.0.0.5:8000"],
         "generative": ["backends.openai.url=http://10.0.0.5:8000"]}


def test_every_experiment_meets_a_model_and_every_model_an_experiment() -> None:
    pairs = [(c["experiment"], c["model"]) for c in CASES if "experiment" in c]
    assert {e for e, _ in pairs} == set(EXPERIMENT_WORKLOAD) and {m for _, m in pairs} == set(BUILT_IN_MODELS)


@pytest.mark.parametrize("choice", CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c in CASES])
def test_every_config_option_composes_and_validates(choice: dict[str, str]) -> None:
    cfg = load_config([f"{group}={option}" for group, option in choice.items()]
                      + [need for option in choice.values() for need in NEEDS.get(option, [])])
    validate(cfg)
    assert f"name: {cfg.experiment.name}" in OmegaConf.to_yaml(cfg)  # what the tier run logs as its config
    assert plan_trials(cfg), "a config must plan at least one trial"


def test_defaults_are_the_local_quick_sweep() -> None:
    cfg = load_config()
    assert (cfg.gpu.name, cfg.model.name, cfg.experiment.name, cfg.cluster.name) == (
        "local", "resnet18", "quick", "local")
    assert cfg.mlflow.experiment == "tierbench"


def test_tier_prices_and_their_sources() -> None:
    expected = {"a100": 0.894, "rtx4090": 0.391}
    for tier, price in expected.items():
        cfg = load_config([f"gpu={tier}"])
        assert cfg.gpu.price_per_hour_usd == price
        assert "Vast.ai" in cfg.gpu.price_source and cfg.gpu.price_seen == "2026-02-20"
    h100 = load_config(["gpu=h100"]).gpu
    assert h100.price_per_hour_usd > 0 and h100.price_source and h100.price_seen


def test_models_take_602112_byte_images() -> None:
    for model in ("resnet18", "resnet50"):
        cfg = load_config([f"model={model}"])
        assert int(np.prod(cfg.model.input_shape)) * 4 == 602_112


def test_protocol_5way_is_the_studys_matrix() -> None:
    exp = load_config(["experiment=protocol_5way"]).experiment
    assert list(exp.batch_sizes) == [1, 4, 8, 16, 32]
    assert list(exp.concurrency) == [1, 8, 16]
    assert list(exp.backends) == ["pytorch", "triton_onnx", "triton_trt"]
    assert list(exp.protocols) == ["http", "grpc"]


def test_list_keys_override_from_the_command_line() -> None:
    cfg = load_config(["experiment.batch_sizes=[1,8]", "experiment.concurrency=[2]",
                          "experiment.backends=[triton_onnx]", "experiment.protocols=[grpc]",
                          "experiment.input_formats=[tensor]"])
    trials = [t for g in plan_trials(cfg) for t in g.trials]
    assert [(t.variant, t.protocol, t.input_format, t.batch_size, t.concurrency) for t in trials] == [
        ("triton_onnx", "grpc", "tensor", 1, 2), ("triton_onnx", "grpc", "tensor", 8, 2)]
    assert trials[0].name == "local/triton_onnx/grpc/tensor/b1/c2"


def test_checked_in_triton_configs_match_the_model_configs() -> None:
    from serving.export import INPUT_NAME, OUTPUT_NAME
    from serving.triton.repository import read_config

    for model in IMAGE_MODELS:
        cfg = load_config([f"model={model}"]).model
        pbtxt = read_config(Path(REPO_ROOT / "model_repository" / model / "config.pbtxt"))
        assert pbtxt.name == model and pbtxt.platform == "onnxruntime_onnx"
        assert pbtxt.max_batch_size == cfg.max_batch_size
        assert (pbtxt.input[0].name, list(pbtxt.input[0].dims)) == (INPUT_NAME, list(cfg.input_shape))
        assert (pbtxt.output[0].name, list(pbtxt.output[0].dims)) == (OUTPUT_NAME, [cfg.num_classes])
