"""`experiment.prompts`: the conversations a generative sweep sends and their lengths in tokens, as a typed schema
that checks itself and becomes the clients' `PromptSource`."""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.workloads.generative.lengths import check_length
from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.model_folder import prompt_tokenizer
from serving.workloads.generative.prompts import LAYOUTS, SHIPPED, SYNTHETIC, LengthSpec, PromptSource


@dataclass
class LengthConfig:
    """A length in tokens, fixed or drawn per request (seeded)."""

    mean: float = 128.0  # fixed: the length; drawn: the lengths' mean
    distribution: str = "fixed"  # fixed | uniform | normal | lognormal
    spread: float = 0.0  # uniform: the half-width; normal, lognormal: the lengths' standard deviation (tokens)
    low: int = 1  # draws are clipped to [low, high]
    high: int | None = None  # null: no upper bound but the model's context

    def spec(self) -> LengthSpec:
        return LengthSpec(float(self.mean), str(self.distribution), float(self.spread), int(self.low),
                          None if self.high is None else int(self.high))


@dataclass
class OutputLengthConfig(LengthConfig):
    """The length each request asks for (max_tokens), fixed or drawn per request (seeded)."""

    mean: float = 64.0  # fixed: the length; drawn: the lengths' mean


@dataclass
class PromptsConfig:
    """What a generative request carries (docs/generative.md, "Prompts")."""

    # synthetic (generated text of the drawn lengths) | corpus (conversations that ship with tierbench) | the path of
    # a JSONL file of conversations on the clients' node (OpenAI messages, or the ShareGPT layout)
    source: str = SYNTHETIC
    layout: str = "auto"  # a JSONL's layout: openai | sharegpt | auto (told apart line by line)
    input_tokens: LengthConfig = field(default_factory=LengthConfig)  # synthetic: each user turn's length
    output_tokens: OutputLengthConfig = field(default_factory=OutputLengthConfig)  # what each request asks
    turns: int = 1  # synthetic: user turns per conversation (> 1: each resends the conversation so far)
    conversations: int = 256  # distinct conversations in each client's pool
    seed: int = 0  # the seed of every draw (lengths, synthetic text): each client actor builds the same pool

    def source_for(self, model: LanguageModelConfig, repeated: bool = False) -> PromptSource:
        """The clients' source, with the model's tokenizer and context length."""
        return PromptSource(source=str(self.source), layout=str(self.layout), input_tokens=self.input_tokens.spec(),
                            output_tokens=self.output_tokens.spec(), turns=int(self.turns),
                            conversations=int(self.conversations), seed=int(self.seed),
                            tokenizer=prompt_tokenizer(model), context_tokens=model.context_tokens,
                            repeated=repeated)

    def settings(self) -> dict[str, object]:
        """What the prompts add to a trial's identity and params."""
        out: dict[str, object] = {"prompts": str(self.source), "prompts_conversations": int(self.conversations),
                                  "prompts_seed": int(self.seed), "output_tokens": _length_text(self.output_tokens)}
        if self.source == SYNTHETIC:
            out.update(input_tokens=_length_text(self.input_tokens), prompts_turns=int(self.turns))
        elif self.source != SHIPPED:
            out["prompts_layout"] = str(self.layout)
        return out

    def check(self, key: str = "experiment.prompts") -> list[str]:
        """What is not allowed, each naming its key and the fix."""
        problems = [*check_length(self.input_tokens.spec(), f"{key}.input_tokens"),
                    *check_length(self.output_tokens.spec(), f"{key}.output_tokens")]
        if self.layout not in LAYOUTS:
            problems.append(f"{key}.layout={self.layout!r} is not allowed: one of {list(LAYOUTS)}")
        for name in ("turns", "conversations"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                problems.append(f"{key}.{name}={value!r} is not allowed: a whole number >= 1")
        return problems


def _length_text(length: LengthConfig) -> str:
    """`128`, or `normal(128, 32)` for a drawn length: readable in the params, and the identity."""
    if length.distribution == "fixed":
        return f"{length.mean:g}"
    bounds = f", [{length.low}, {length.high}]" if length.high is not None or length.low != 1 else ""
    return f"{length.distribution}({length.mean:g}, {length.spread:g}{bounds})"
