"""What a launched generative server loads: a folder of real weights, or an architecture alone written here with a
stand-in tokenizer (random weights); and what is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.model_folder import ModelFolderError, model_folder, prompt_tokenizer, random_weights
from serving.workloads.generative.tiny_model import ARCHITECTURE
from serving.workloads.generative.tokenizer import load_tokenizer

LLAMA_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 131072}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIERBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_an_architecture_is_written_once_with_its_config_and_a_tokenizer_of_its_vocabulary() -> None:
    model = LanguageModelConfig(name="llama-8b", architecture=dict(LLAMA_8B))
    folder = model_folder(model)
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 32, 128256)
    assert not list(folder.glob("*.safetensors")), "random weights: none written"
    tokenizer = load_tokenizer(folder)
    assert tokenizer.count("hello") == 5 and len(tokenizer._tokenizer) == 128256
    assert tokenizer.context_tokens == 131072
    assert model_folder(model) == folder and random_weights(model)
    assert prompt_tokenizer(model) == str(folder), "prompts are measured in the tokens the server counts"


def test_the_tiny_models_architecture_is_the_one_its_config_file_names() -> None:
    model = load_config(["experiment=generative_launched"]).model
    assert model.name == "tiny-llama" and dict(model.architecture) == ARCHITECTURE


def test_a_weights_folder_is_loaded_as_it_is_and_one_without_a_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "config.json").write_text("{}")
    assert model_folder(LanguageModelConfig(name="m", weights=str(tmp_path / "real"))) == tmp_path / "real"
    with pytest.raises(ModelFolderError, match=r"model.weights=.*no config.json there"):
        model_folder(LanguageModelConfig(name="m", weights=str(tmp_path)))
    with pytest.raises(ModelFolderError, match="names nothing a launched server can load"):
        model_folder(LanguageModelConfig(name="m"))


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=llama3_8b"], "backends.serve_transformers launches its own server and model "
                          "'meta-llama/Llama-3.1-8B-Instruct' names nothing it can load"),
    (["+model.weights=/models/x"], "model.weights='/models/x' and model.architecture are both set"),
    (["~model.architecture.model_type"], "has no model_type"),
])
def test_a_model_a_launched_server_cannot_load_is_refused_before_anything_starts(overrides: list[str],
                                                                                  message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(load_config(["experiment=generative_launched", "experiment.backends=[serve_transformers]",
                              *overrides]))
    assert message in str(info.value)
