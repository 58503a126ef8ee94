"""The token ceiling on a node: the engine a launched generative server runs, timed in-process with no server around
it, at the batches the trials keep in flight and the prompts' lengths: output tokens per second. What the server
then streams is set against it (`experiments.measure.token_efficiency`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from serving.workloads.generative.model import LanguageModelConfig


@dataclass(frozen=True)
class TokenEngine:
    """What generates the tokens inside a launched server, as the ceiling times it: the engine (transformers'
    `generate`, vLLM's offline `LLM.generate`), its device, what else changes its speed, and the most conversations
    one engine generates at once (a trial keeping more in flight queues the rest)."""

    kind: str  # transformers | vllm
    device: str  # cpu | cuda
    settings: tuple[tuple[str, Any], ...] = ()  # e.g. (("dtype", "bfloat16"), ("threads", 2)); vLLM's engine args
    max_batch: int = 1

    @property
    def key(self) -> str:
        """`transformers/cpu/dtype=float32`: one per engine and settings, in trial params and the ceiling's file."""
        extras = ",".join(f"{k}={v}" for k, v in self.settings if v is not None)
        return f"{self.kind}/{self.device}" + (f"/{extras}" if extras else "")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "settings": [list(pair) for pair in self.settings]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> TokenEngine:
        return TokenEngine(data["kind"], data["device"], tuple((k, v) for k, v in data.get("settings", ())),
                           int(data.get("max_batch", 1)))


def time_tokens(model: dict[str, Any], engine: dict[str, Any], batches: list[int], input_tokens: int,
                output_tokens: int, repeats: int) -> dict[str, Any]:
    """On the node: output tokens/s of `engine` at each batch (the best of `repeats` runs after an untimed one);
    `{"points": {batch: tok_s}, "seconds": ...}`."""
    started = time.perf_counter()
    spec = TokenEngine.from_json(engine)
    config = LanguageModelConfig(**model)
    timer = _transformers_timer if spec.kind == "transformers" else _vllm_timer if spec.kind == "vllm" else None
    if timer is None:
        raise ValueError(f"no in-process timing for the engine {spec.kind!r}")
    points = timer(config, spec, sorted(set(batches)), input_tokens, output_tokens, repeats)
    return {"points": {str(b): v for b, v in points.items()}, "seconds": time.perf_counter() - started}


def _transformers_timer(model: LanguageModelConfig, spec: TokenEngine, batches: list[int], input_tokens: int,
                        output_tokens: int, repeats: int) -> dict[int, float]:
    from serving.generation.transformers_engine import TransformersGenerator

    settings = dict(spec.settings)
    engine = TransformersGenerator(model, spec.device, str(settings.get("dtype") or "auto"), settings.get("threads"))
    return {b: engine.output_tokens_per_s(b, input_tokens, output_tokens, repeats) for b in batches}


def _vllm_timer(model: LanguageModelConfig, spec: TokenEngine, batches: list[int], input_tokens: int,
                output_tokens: int, repeats: int) -> dict[int, float]:
    """vLLM's offline engine (`LLM.generate`) with the server's engine arguments, every answer exactly
    `output_tokens` long (ignore_eos)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from serving.workloads.generative.model_folder import model_folder, random_weights

    args = {k: v for k, v in spec.settings if v is not None}
    if random_weights(model):
        args.update(load_format="dummy", seed=int(model.seed))
    llm = LLM(model=str(model_folder(model)), **args)
    params = SamplingParams(max_tokens=output_tokens, min_tokens=output_tokens, ignore_eos=True, temperature=0.0)
    prompt = TokensPrompt(prompt_token_ids=[1 + i % 100 for i in range(max(1, input_tokens))])
    points = {}
    for batch in batches:
        llm.generate([prompt] * batch, params, use_tqdm=False)
        best = 0.0
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            llm.generate([prompt] * batch, params, use_tqdm=False)
            best = max(best, batch * output_tokens / (time.perf_counter() - started))
        points[batch] = best
    return points
