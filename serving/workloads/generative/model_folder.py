"""The folder a launched generative server loads (Hugging Face layout), on the server's node: the model's own
(`model.weights`), or one written here from its architecture alone (`model.architecture`): config.json as
transformers completes it, and the model's tokenizer (`model.tokenizer`) or the stand-in of one token per character
padded to the vocabulary's size. No weights are written: vLLM runs such a folder with `--load-format dummy`, the
transformers servers initialise it from the model's seed. The folder is written once per node and architecture, to
a temporary name first, so servers starting at once never read half of one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from serving.paths import cache_root
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.tokenizer import TOKENIZER_FILES

# What a Hugging Face tokenizer folder may hold besides its tokenizer files (copied with them from model.tokenizer).
TOKENIZER_EXTRAS = ("special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                    "generation_config.json")


class ModelFolderError(ValueError):
    """The model names no folder a server can load, or its folder is not one; the message names the key and fix."""


def random_weights(model: LanguageModelConfig) -> bool:
    """Whether a launched server runs the model with random weights (an architecture alone)."""
    return model.weights is None and model.architecture is not None


def model_folder(model: LanguageModelConfig) -> Path:
    """The folder a launched server loads: `model.weights` as given, or the architecture's, written on first use."""
    if model.weights:
        folder = Path(model.weights).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelFolderError(f"model.weights={model.weights!r}: no config.json there on this node: give a local "
                                   "folder in Hugging Face layout (as save_pretrained writes it), or "
                                   "model.architecture to run the architecture with random weights")
        return folder
    if model.architecture is None:
        raise ModelFolderError(f"model {model.name!r} names nothing a launched server can load: give model.weights (a "
                               "local folder in Hugging Face layout) or model.architecture (its config.json's sizes; "
                               "random weights), or measure a server that already runs (backends.openai.url)")
    return _architecture_folder(model)


def _architecture_folder(model: LanguageModelConfig) -> Path:
    architecture = dict(model.architecture or {})
    key = json.dumps({"architecture": architecture, "tokenizer": model.tokenizer}, sort_keys=True, default=str)
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in model.name)[-40:]
    folder = cache_root() / "language-models" / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        _write(model, architecture, staging)
        try:
            os.rename(staging, folder)
        except OSError:  # another server of the node wrote it first
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _write(model: LanguageModelConfig, architecture: dict, folder: Path) -> None:
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(**architecture)
    except (ValueError, TypeError, KeyError) as error:
        raise ModelFolderError(f"model.architecture={architecture!r}: transformers cannot build a config from it "
                               f"({type(error).__name__}: {error}): give its config.json's model_type and sizes") \
            from None
    config.save_pretrained(folder)
    if model.tokenizer:
        source = Path(model.tokenizer).expanduser()
        names = [n for n in (*TOKENIZER_FILES, *TOKENIZER_EXTRAS) if (source / n).is_file()]
        if not any(n in TOKENIZER_FILES for n in names):
            raise ModelFolderError(f"model.tokenizer={model.tokenizer!r}: no tokenizer there on this node (no "
                                   f"{' or '.join(TOKENIZER_FILES)}): give the folder of the model's tokenizer, or "
                                   "null for the stand-in of one token per character")
        for name in names:
            shutil.copy2(source / name, folder / name)
        return
    from serving.workloads.generative.tiny_model import char_tokenizer

    context = int(getattr(config, "max_position_embeddings", 0) or 0) or 2048
    char_tokenizer(int(config.vocab_size), context).save_pretrained(folder)


def prompt_tokenizer(model: LanguageModelConfig) -> str | None:
    """The tokenizer folder synthetic prompts are measured in: the model's own, else its architecture's stand-in (the
    same the launched server tokenizes with), else none."""
    if model.tokenizer:
        return model.tokenizer
    if random_weights(model):
        return str(model_folder(model))
    return None
