"""What one generative request records beyond its send and end: when its output arrived, part by part, and how
many tokens went in and came out (and who counted them). Times are seconds after the client sent the request, so
they need no shared clock: the load generator places them on its own (`experiments.measure.load`)."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

import numpy as np


class CountedBy(StrEnum):
    """Who counted a request's tokens (trial param `tokens_counted_by`)."""

    USAGE = "usage"  # the server's own `usage` (asked for with stream_options.include_usage)
    TOKENIZER = "tokenizer"  # the model's tokenizer over the answer's text (model.tokenizer), when it gave no usage
    EVENTS = "events"  # neither: one token per event that carried output (a lower bound where events hold several)


class TokenTrace(NamedTuple):
    """One request's tokens. `output_after_s`: the arrival of every event that carried output, seconds after the send
    (empty for an answer not streamed); the first is the time to first token from the send."""

    output_after_s: np.ndarray  # float64, in arrival order
    output_tokens: int  # tokens served
    input_tokens: int  # tokens of the prompt (-1: unknown)
    requested_tokens: int  # max_tokens asked for
    counted_by: str  # CountedBy

    @property
    def streamed(self) -> bool:
        return self.output_after_s.size > 0

    @property
    def first_token_after_s(self) -> float:
        """From the send to the first output (NaN when the answer did not stream)."""
        return float(self.output_after_s[0]) if self.output_after_s.size else float("nan")

    @property
    def gaps_s(self) -> np.ndarray:
        """The gaps between consecutive events with output: the inter-token latencies as the client saw them."""
        return np.diff(self.output_after_s)
