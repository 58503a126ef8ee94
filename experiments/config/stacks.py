"""The stacks an experiment measures (a backend variant, a protocol, an input format): every combination of
`experiment.backends` x `protocols` x `input_formats`, or only `experiment.stacks` (a study's cells)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig


@dataclass(frozen=True)
class Stack:
    """What a trial's requests go through: a backend variant, a protocol, an input format."""

    variant: str
    protocol: str
    input_format: str

    @classmethod
    def parse(cls, text: str) -> Stack:
        """`fastapi/http/jpeg_base64` -> Stack; ValueError for anything else."""
        parts = str(text).split("/")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{text!r} is not variant/protocol/input_format")
        return cls(*parts)


def stacks(exp: ExperimentConfig) -> list[Stack]:
    """The stacks the experiment measures: `experiment.stacks` when given, else every combination of backends x
    protocols x input formats, in that order."""
    if exp.stacks:
        return [Stack.parse(text) for text in exp.stacks]
    return [Stack(*combination) for combination in itertools.product(exp.backends, exp.protocols, exp.input_formats)]


def input_formats_of(exp: ExperimentConfig, variant: str) -> tuple[str, ...]:
    """The input formats `variant`'s trials send (its server prepares only those, e.g. Triton's JPEG ensemble)."""
    return tuple(dict.fromkeys(s.input_format for s in stacks(exp) if s.variant == variant))


