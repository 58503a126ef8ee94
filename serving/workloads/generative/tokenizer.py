"""The model's own tokenizer, read from a local folder (Hugging Face layout, as `save_pretrained` writes it): it sets
synthetic prompts' lengths and counts each request's input tokens as the server will, chat template applied. Nothing
is fetched (`local_files_only`), and transformers is imported only when a tokenizer is loaded, so importing this
module stays cheap for the config and planning code."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

TOKENIZER_KEY = "model.tokenizer"  # the config key that names the folder (error messages name it)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # one of them marks a tokenizer folder
SANE_CONTEXT = 10**7  # transformers' model_max_length is ~1e30 when the tokenizer does not know its model's context
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")  # config.json's names
FIX = "give the folder of the model's tokenizer, as saved by save_pretrained, or null to count tokens from the " \
      "server's usage"


class TokenizerError(ValueError):
    """The tokenizer folder is missing, is not a tokenizer, or does not load; the message names the folder and the
    fix."""


def plain_text(messages: Iterable[tuple[str, str]]) -> str:
    """A conversation as one text, for /v1/completions and for tokenizers without a chat template: a `role: content`
    line per message, then `assistant:` (no trailing space: BPE tokenizers fold the space into the next word)."""
    return "".join(f"{role}: {content}\n" for role, content in messages) + "assistant:"


def _pairs(messages: Iterable[tuple[str, str] | Mapping[str, str]]) -> list[tuple[str, str]]:
    """(role, content) pairs from pairs or OpenAI-style {"role", "content"} dicts."""
    return [(m["role"], m["content"]) if isinstance(m, Mapping) else (m[0], m[1]) for m in messages]


class LocalTokenizer:
    """One model's tokenizer, loaded once per folder on each node (`load_tokenizer`)."""

    def __init__(self, folder: Path, tokenizer: Any, key: str = TOKENIZER_KEY) -> None:
        self.folder = folder
        self.key = key
        self._tokenizer = tokenizer

    def __repr__(self) -> str:
        return f"LocalTokenizer({str(self.folder)!r})"

    @property
    def name(self) -> str:
        """The folder's name (a model's folder is usually named after it)."""
        return self.folder.name

    @property
    def has_chat_template(self) -> bool:
        """False: `chat_count` counts `plain_text` of the conversation, not what a chat server would see."""
        return bool(getattr(self._tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens (no BOS): what the text itself costs. Quiet about texts longer than
        the model's context: the pool's context check says that once, with the keys to change."""
        return list(self._tokenizer.encode(text, add_special_tokens=False, verbose=False))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, spaces as they were (no clean-up), so decode then encode gives the ids back."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def count(self, text: str) -> int:
        """Tokens in `text`, no special tokens."""
        return len(self.encode(text))

    def render(self, messages: Iterable[tuple[str, str] | Mapping[str, str]]) -> str:
        """The conversation as the server's prompt: chat template applied with the generation prompt (BOS included
        where the template writes it), or `plain_text` without a template."""
        pairs = _pairs(messages)
        if not self.has_chat_template:
            return plain_text(pairs)
        conversation = [{"role": role, "content": content} for role, content in pairs]
        try:
            return self._tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        except Exception as error:  # jinja's errors, and templates that raise (e.g. "roles must alternate")
            roles = ", ".join(role for role, _ in pairs)
            raise TokenizerError(
                f"{self.key}={str(self.folder)!r}: its chat template refuses a conversation with roles {roles} "
                f"({type(error).__name__}: {error}): a chat server with this model would refuse it too; give "
                "conversations this model's template accepts (some accept no system turn, or only alternating "
                "user/assistant turns)") from error

    def chat_count(self, messages: Iterable[tuple[str, str] | Mapping[str, str]]) -> int:
        """Input tokens of a chat request, as vLLM and `transformers serve` count them: the rendered template,
        tokenized without adding special tokens again (the template has written the BOS)."""
        return self.count(self.render(messages))

    @cached_property
    def context_tokens(self) -> int | None:
        """The model's context length: config.json's (max_position_embeddings, or its text_config's, for models that
        nest one), else the tokenizer's model_max_length when it is a real figure, else None (unknown)."""
        config_file = self.folder / "config.json"
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text())
            except (OSError, ValueError):
                config = {}
            for section in (config, config.get("text_config") or {}):
                for name in CONTEXT_KEYS:
                    value = section.get(name) if isinstance(section, dict) else None
                    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < SANE_CONTEXT:
                        return value
        value = getattr(self._tokenizer, "model_max_length", None)
        if isinstance(value, int) and 0 < value < SANE_CONTEXT:
            return value
        return None


def load_tokenizer(folder: str | Path, key: str = TOKENIZER_KEY) -> LocalTokenizer:
    """The tokenizer in `folder`, loaded once per folder in this process (the client actor's node loads it once).
    Raises TokenizerError naming `key`, the folder and the fix."""
    path = Path(folder).expanduser()
    return _load(str(path.resolve() if path.exists() else path), key)


@lru_cache(maxsize=8)
def _load(folder: str, key: str) -> LocalTokenizer:
    path = Path(folder)
    where = f"{key}={folder!r}"
    if not path.exists():
        raise TokenizerError(f"{where}: no such folder on this node: {FIX}")
    if not path.is_dir():
        raise TokenizerError(f"{where}: not a folder: {FIX}")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise TokenizerError(f"{where}: no tokenizer there (no {' or '.join(TOKENIZER_FILES)}): {FIX}")
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise TokenizerError(f"{where}: transformers is not installed on this node: pip install "
                             "'tierbench[generative]', or set it to null to count tokens from the server's usage") \
            from error
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as error:  # transformers raises OSError, ValueError, KeyError... for a broken folder
        raise TokenizerError(f"{where}: the tokenizer does not load ({type(error).__name__}: {error}): {FIX}") \
            from error
    return LocalTokenizer(path, tokenizer, key)
