"""vLLM's engine as both servers that run it set it up (`vllm serve`, serving/vllm/; Ray Serve LLM, serving/serve_llm/):
the engine settings their config entries share, checked before anything starts, and the engine arguments they become
(`engine_args`): the `--flags` of `vllm serve` (`cli_args`) or Serve LLM's `engine_kwargs`, from one dict, so both
servers run the engine the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serving.generation.ceiling import TokenEngine
from serving.generation.settings import LanguageServerSettings
from serving.settings import is_positive_int

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches
    from serving.workloads.generative.model import LanguageModelConfig

DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# vLLM's quantization methods that need a checkpoint quantized beforehand (its weights' scales) and those it applies
# to the weights it loads (online): a model run with random weights (no checkpoint) takes the online ones only.
CHECKPOINT_QUANTIZATIONS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "modelopt",
                            "modelopt_fp4", "gguf", "bitsandbytes", "marlin", "fbgemm_fp8", "mxfp4")
ONLINE_QUANTIZATIONS = ("fp8",)
QUANTIZATIONS = (*ONLINE_QUANTIZATIONS, *CHECKPOINT_QUANTIZATIONS)


@dataclass
class VllmEngineSettings(LanguageServerSettings):
    """How vLLM's engine runs the model, whichever server holds it. Null keeps vLLM's own default (which changes
    between its releases, so the trial records what was asked, and the deploy file says it)."""

    max_num_seqs: int | None = None  # sequences the scheduler runs at once (vLLM's default: 256, or per GPU class)
    max_num_batched_tokens: int | None = None  # tokens one engine step may compute (prefill chunks included)
    enable_chunked_prefill: bool | None = None  # split long prompts' prefill across steps, beside decodes
    enable_prefix_caching: bool | None = None  # reuse the KV cache of a prompt prefix seen before
    gpu_memory_utilization: float = 0.9  # the share of the GPU's memory the engine takes (weights + KV cache)
    dtype: str = "auto"  # the weights' and activations' type: auto (the config's) | half | bfloat16 | float32
    quantization: str | None = None  # e.g. fp8 (online, any weights); awq, gptq, ...: a quantized checkpoint
    tensor_parallel_size: int = 1  # GPUs one engine splits the model over (whole GPUs, on one node)
    max_model_len: int | None = None  # the context the engine reserves for (null: model.context_tokens, else config)

    def check(self, name: str, model: LanguageModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, key) is not None and not is_positive_int(getattr(self, key)):
                problems.append(self.refuse(name, key, "a positive integer, or null for vLLM's default"))
        if not is_positive_int(self.tensor_parallel_size):
            problems.append(self.refuse(name, "tensor_parallel_size", "a positive integer: the GPUs one engine "
                                                                      "splits the model over"))
        if not 0 < self.gpu_memory_utilization <= 1:
            problems.append(self.refuse(name, "gpu_memory_utilization", "a share of the GPU's memory in (0, 1], "
                                                                        "e.g. 0.9"))
        if self.dtype not in DTYPES:
            problems.append(self.refuse(name, "dtype", f"choose from {list(DTYPES)}"))
        problems += self._quantization_problems(name, model)
        problems += self._length_problems(name, model)
        return problems

    def _quantization_problems(self, name: str, model: LanguageModelConfig) -> list[str]:
        q = self.quantization
        if q is None:
            return []
        if q not in QUANTIZATIONS:
            return [self.refuse(name, "quantization", f"choose from {list(QUANTIZATIONS)}, or null")]
        if q not in ONLINE_QUANTIZATIONS and getattr(model, "weights", None) is None:
            return [self.refuse(name, "quantization", f"{q} reads the scales of a checkpoint quantized with it, and "
                                                      f"model {model.name!r} runs random weights (no checkpoint): "
                                                      f"use one vLLM applies to any weights "
                                                      f"({list(ONLINE_QUANTIZATIONS)}), or give model.weights")]
        return []

    def _length_problems(self, name: str, model: LanguageModelConfig) -> list[str]:
        problems = []
        context = getattr(model, "context_tokens", None)
        if self.max_model_len is not None and context and is_positive_int(self.max_model_len) \
                and self.max_model_len > context:
            problems.append(self.refuse(name, "max_model_len", f"at most model.context_tokens={context} (vLLM refuses "
                                                               "a longer context than the model's); or null"))
        batched, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if is_positive_int(batched) and is_positive_int(seqs) and batched < seqs:
            problems.append(self.refuse(name, "max_num_batched_tokens", f">= max_num_seqs={seqs} (vLLM refuses a "
                                                                        "step smaller than its sequences)"))
        if is_positive_int(batched) and self.enable_chunked_prefill is False:
            length = self.max_model_len or context
            if length and batched < length:
                problems.append(self.refuse(name, "max_num_batched_tokens", f">= the context ({length} tokens) "
                                                                            "without chunked prefill: a whole prompt "
                                                                            "must fit one step; or set "
                                                                            "enable_chunked_prefill: true"))
        return problems

    def engine_args(self, model: LanguageModelConfig, random_weights: bool) -> dict[str, Any]:
        """The engine's arguments by vLLM's names (`vllm serve`'s flags, Serve LLM's `engine_kwargs`): only those set,
        vLLM's defaults left to it; a model with random weights loads none (`load_format: dummy`), seeded."""
        args: dict[str, Any] = {
            "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
            "enable_chunked_prefill": self.enable_chunked_prefill, "enable_prefix_caching": self.enable_prefix_caching,
            "gpu_memory_utilization": float(self.gpu_memory_utilization),
            "dtype": None if self.dtype == "auto" else self.dtype, "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size if self.tensor_parallel_size != 1 else None,
            "max_model_len": self.max_model_len or getattr(model, "context_tokens", None),
        }
        if random_weights:
            args.update(load_format="dummy", seed=int(model.seed))
        return {key: value for key, value in args.items() if value is not None}

    def token_engine(self, model: LanguageModelConfig) -> TokenEngine:
        """vLLM's offline engine (`LLM.generate`) with these engine arguments, as the token ceiling times it, up to
        `max_num_seqs` sequences at once (null: vLLM's default, 256); its own timing loads random weights itself."""
        args = self.engine_args(model, random_weights=False)
        return TokenEngine("vllm", "cuda", tuple(sorted(args.items())), int(self.max_num_seqs or 256))

    def engine_params(self) -> dict[str, Any]:
        """The trial params every vLLM server records (null: vLLM's default)."""
        return {f"vllm_{key}": "" if value is None else value for key, value in (
            ("max_num_seqs", self.max_num_seqs), ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("enable_chunked_prefill", self.enable_chunked_prefill),
            ("enable_prefix_caching", self.enable_prefix_caching),
            ("gpu_memory_utilization", self.gpu_memory_utilization), ("dtype", self.dtype),
            ("quantization", self.quantization), ("tensor_parallel_size", self.tensor_parallel_size),
            ("max_model_len", self.max_model_len))}


def cli_args(engine_args: dict[str, Any]) -> list[str]:
    """`vllm serve`'s flags for `engine_args` (a switch as `--name` / `--no-name`, vLLM's boolean flags)."""
    out: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else f"--no-{flag[2:]}")
        else:
            out += [flag, str(value)]
    return out
