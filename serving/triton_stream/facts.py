"""What a node offers the streaming Triton beyond a `tritonserver` (`serving.tritonserver.facts`) and torch
(`serving.pytorch.facts`): transformers, which its Python-backend model runs the language model with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

INSTALL = "pip install -e '.[generative]' (transformers, tokenizers)"


@dataclass(frozen=True)
class TransformersFacts:
    """The defaults mean: not probed (transformers trusted)."""

    KEY: ClassVar[str] = "triton_stream"

    version: str = ""
    problem: str | None = None  # why the Python backend's model cannot import transformers

    @classmethod
    def probe(cls) -> TransformersFacts:
        from importlib import metadata
        from importlib.util import find_spec

        if find_spec("transformers") is None:
            return cls(problem=f"transformers is not installed: {INSTALL}")
        return cls(version=metadata.version("transformers"))
