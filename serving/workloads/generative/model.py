"""A language model as a sweep knows it (the schema of conf/model/'s language models, `base_language_model`): the
name it is served under, where its tokenizer is, and, for the servers tierbench launches itself, what they load:
a local folder in Hugging Face layout (`weights`), or an architecture's config alone (`architecture`), run with
random weights where only its size matters (pricing a tier for a 70B-class model without downloading it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from serving.model_config import ServedModel


@dataclass
class LanguageModelConfig(ServedModel):
    """A language model served through an OpenAI-compatible API."""

    name: str = MISSING  # its name where it is served (what /v1/models lists, unless backends.<entry>.model_name)
    workload: ClassVar[str] = "generative"
    # A local folder holding the model's tokenizer (tokenizer.json or tokenizer_config.json, as save_pretrained writes
    # them) on the clients' node: it sets synthetic prompts' lengths in tokens, applies the chat template, and counts
    # an answer's tokens when the server reports no usage. null: the architecture's stand-in tokenizer where
    # `architecture` is given (one token per character), else lengths approximate and tokens counted by the server
    tokenizer: str | None = None
    # The model's context length in tokens (prompt and answer); null: the tokenizer folder's config.json
    # (max_position_embeddings), else unchecked
    context_tokens: int | None = None
    # What a server tierbench launches loads (an endpoint's server loads its own): a local folder in Hugging Face
    # layout (config.json, weights, tokenizer) on the server's node ...
    weights: str | None = None
    # ... or the architecture alone, as config.json says it (model_type and sizes, e.g. {model_type: llama,
    # hidden_size: 4096, num_hidden_layers: 32, ...}): run with random weights (vLLM's --load-format dummy,
    # transformers' seeded initialisation), as fast as the real ones where only the size matters. Its tokenizer is
    # `tokenizer` when given, else a stand-in of one token per character padded to the vocabulary's size
    architecture: dict[str, Any] | None = None
    seed: int = 0  # the random weights' seed (architecture only)

    @property
    def launchable(self) -> bool:
        """Whether a server tierbench starts can load it (it names weights or an architecture)."""
        return bool(self.weights or self.architecture)

    def check(self, key: str = "model") -> list[str]:
        """What a launched server cannot load, naming the key and the fix."""
        if self.weights and self.architecture:
            return [f"{key}.weights={self.weights!r} and {key}.architecture are both set: a launched server loads one "
                    f"of them: keep the folder of real weights, or the architecture alone (random weights)"]
        if self.architecture is not None and not str(self.architecture.get("model_type") or ""):
            return [f"{key}.architecture={dict(self.architecture)!r} has no model_type: give the architecture as its "
                    "config.json says it (e.g. model_type: llama, hidden_size, num_hidden_layers, ...)"]
        return []
