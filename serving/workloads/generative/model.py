"""A language model as a sweep knows it (the schema of conf/model/'s language models, `base_language_model`): the
name it is served under and where its tokenizer is. tierbench sends it conversations and counts its tokens; it
does not load its weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from serving.model_config import ServedModel


@dataclass
class LanguageModelConfig(ServedModel):
    """A language model served through an OpenAI-compatible API."""

    name: str = MISSING  # its name where it is served (what /v1/models lists, unless backends.<entry>.model_name)
    workload: ClassVar[str] = "generative"
    # A local folder holding the model's tokenizer (tokenizer.json or tokenizer_config.json, as save_pretrained writes
    # them) on the clients' node: it sets synthetic prompts' lengths in tokens, applies the chat template, and counts
    # an answer's tokens when the server reports no usage. null: lengths approximate, tokens counted by the server
    tokenizer: str | None = None
    # The model's context length in tokens (prompt and answer); null: the tokenizer folder's config.json
    # (max_position_embeddings), else unchecked
    context_tokens: int | None = None
