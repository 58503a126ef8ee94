"""The conversations generative requests carry, built on the client's node before any trial is timed: synthetic
prompts of set token lengths (fixed or drawn: uniform, normal, lognormal; seeded), a user's JSONL of conversations
(OpenAI messages, or the ShareGPT layout), multi-turn chats that resend their growing prefix, or the small corpus that
ships with tierbench (`corpus/conversations.jsonl`). Token lengths are the model's own tokenizer's (a local folder,
`serving.workloads.generative.tokenizer`); nothing is fetched."""

from __future__ import annotations

from dataclasses import dataclass, field

SYNTHETIC = "synthetic"  # generated text of the drawn lengths
SHIPPED = "corpus"  # the conversations that ship with tierbench
DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
LAYOUTS = ("auto", "openai", "sharegpt")


@dataclass(frozen=True)
class LengthSpec:
    """A token length, fixed or drawn per request (seeded). `spread`: uniform, the half-width; normal and lognormal,
    the standard deviation of the lengths, in tokens. Draws are clipped to [low, high]."""

    mean: float = 128.0
    distribution: str = "fixed"  # fixed | uniform | normal | lognormal
    spread: float = 0.0
    low: int = 1
    high: int | None = None


@dataclass(frozen=True)
class PromptSource:
    """Where the conversations come from and their lengths (hashable: it crosses Ray and names cached pools)."""

    source: str = SYNTHETIC  # synthetic | corpus | the path of a JSONL file on the clients' node
    layout: str = "auto"  # a JSONL's layout: openai ({"messages": [...]}) | sharegpt ({"conversations": [...]}) | auto
    input_tokens: LengthSpec = field(default_factory=LengthSpec)  # synthetic: each user turn's length
    output_tokens: LengthSpec = field(default_factory=lambda: LengthSpec(mean=64.0))  # max_tokens of each request
    turns: int = 1  # synthetic: user turns per conversation (> 1: each turn resends the conversation so far)
    conversations: int = 256  # distinct conversations in the pool
    seed: int = 0
    tokenizer: str | None = None  # the model's tokenizer folder (null: lengths approximate, counted by the server)
    context_tokens: int | None = None  # the model's context length (null: unchecked)
    repeated: bool = False  # every request the same (the caching audit's twin)


@dataclass(frozen=True)
class Prompt:
    """One request: the conversation so far (chat) or its text (completions), how long it is, how much to answer."""

    messages: tuple[tuple[str, str], ...]  # (role, content), the last a user turn
    text: str  # the prompt of /v1/completions: the conversation as one text
    input_tokens: int  # by the tokenizer (chat: with the chat template applied); -1 without one
    max_tokens: int  # the output length asked for
    conversation: int = 0
    turn: int = 0
