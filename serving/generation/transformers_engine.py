"""A language model in transformers, as the servers that run it in-process use it and as the ceiling times it: the
model folder loaded (real weights, or the architecture initialised from its seed), prompts tokenized as a chat
server tokenizes them, and greedy `generate` over a left-padded batch that never stops before its token count
(`min_new_tokens`), every step handed to a streamer as it is decoded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from serving.workloads.generative.model import LanguageModelConfig
from serving.workloads.generative.model_folder import model_folder, random_weights

DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def resolved_dtype(dtype: str, device: str) -> str:
    """`auto`: bfloat16 on a GPU, float32 on a CPU (where half precision is slow or missing)."""
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return DTYPES[dtype]


class StepStreamer:
    """transformers' streamer protocol (`put`, `end`): the prompt first, then each step's token per sequence; hands
    each step to `on_step` as a list of ids and calls `on_end` once."""

    def __init__(self, on_step: Callable[[list[int]], None], on_end: Callable[[], None]) -> None:
        self.on_step, self.on_end = on_step, on_end
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.on_step([int(v) for v in value.reshape(-1).tolist()])

    def end(self) -> None:
        self.on_end()


class TransformersGenerator:
    """One model on one device: tokenize, generate, decode."""

    def __init__(self, model: LanguageModelConfig, device: str = "cpu", dtype: str = "auto",
                 threads: int | None = None) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(int(threads))
        self.device = device
        self.dtype = resolved_dtype(dtype, device)
        folder = model_folder(model)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        torch_dtype = getattr(torch, self.dtype)
        if random_weights(model):
            config = AutoConfig.from_pretrained(folder, local_files_only=True)
            state = torch.random.get_rng_state()
            try:
                torch.manual_seed(int(model.seed))
                self.model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
            finally:
                torch.random.set_rng_state(state)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
        self.model.to(device).eval()
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (self.eos_id or 0)
        self.lock = threading.Lock()  # one generate at a time on the model

    def chat_ids(self, messages: Iterable[Mapping[str, str]]) -> list[int]:
        """A chat request's prompt: the chat template with the generation prompt, tokenized without adding special
        tokens again (as vLLM and tierbench's token counts do); the plain `role: content` text without a template."""
        conversation = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        else:
            text = "".join(f"{m['role']}: {m['content']}\n" for m in conversation) + "assistant:"
        return self.text_ids(text)

    def text_ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def generate(self, prompts: Sequence[Sequence[int]], new_tokens: int, streamer: StepStreamer | None = None) -> Any:
        """Greedy `generate` of `new_tokens` tokens for every prompt at once (left-padded, never stopping early)."""
        import torch

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if prompt:
                ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
                mask[row, width - len(prompt):] = 1
        with self.lock, torch.inference_mode():
            return self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                       max_new_tokens=int(new_tokens), min_new_tokens=int(new_tokens),
                                       do_sample=False, pad_token_id=self.pad_id, streamer=streamer)

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def output_tokens_per_s(self, batch: int, input_tokens: int, output_tokens: int, repeats: int = 3) -> float:
        """The ceiling: output tokens per second of `batch` prompts of `input_tokens` tokens each generating
        `output_tokens`, the best of `repeats` timed runs after one untimed."""
        prompt = [self.text_ids("a" * max(1, input_tokens))[:input_tokens] or [self.pad_id]] * batch
        self.generate(prompt, output_tokens)
        best = 0.0
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            self.generate(prompt, output_tokens)
            self.synchronize()
            best = max(best, batch * output_tokens / (time.perf_counter() - started))
        return best
