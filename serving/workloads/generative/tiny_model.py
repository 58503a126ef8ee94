"""A tiny random-weight Llama with its tokenizer, written locally in about a second (nothing downloaded): the model
the tests and the CPU examples serve (`transformers serve`, the stand-in) and count tokens with.

Its tokenizer is a word-level vocabulary of single characters (one token per character of printable ASCII), with a
chat template, so token counts are easy to reason about: "hello" is 5 tokens. The same tokenizer, padded to a
vocabulary's size, stands in for the tokenizer of an architecture run with random weights
(serving/workloads/generative/model_folder.py).

    python -m serving.workloads.generative.tiny_model DIR
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path
from typing import Any

NAME = "tiny-llama"
# A plain chat template: `role: content` lines, then the assistant's prompt.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
CONTEXT_TOKENS = 2048
SPECIAL = ("<unk>", "<s>", "</s>")
# The tiny model's architecture as config.json says it (conf/model/tiny_llama.yaml gives the same): its vocabulary is
# `vocabulary()`'s 99 tokens, <s> = 1 and </s> = 2.
ARCHITECTURE = {"model_type": "llama", "vocab_size": 99, "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                "max_position_embeddings": CONTEXT_TOKENS, "bos_token_id": 1, "eos_token_id": 2}


def vocabulary(size: int | None = None) -> dict[str, int]:
    """The special tokens, then every printable ASCII character (space and newline included), one token each; with
    `size`, filler tokens `<|tN|>` up to it (a random model's output ids all decode to something)."""
    vocab = {token: index for index, token in enumerate(SPECIAL)}
    for char in string.ascii_letters + string.digits + string.punctuation + " \n":
        vocab.setdefault(char, len(vocab))
    for index in range(len(vocab), size or 0):
        vocab[f"<|t{index}|>"] = index
    return vocab


def char_tokenizer(vocab_size: int | None = None, context_tokens: int = CONTEXT_TOKENS) -> Any:
    """The one-token-per-character tokenizer with its chat template (a transformers `PreTrainedTokenizerFast`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary(vocab_size), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   model_max_length=context_tokens)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_tiny_llama(folder: str | Path, seed: int = 0) -> Path:
    """Write the model (safetensors, config.json) and its tokenizer to `folder`; returns it. The same seed gives the
    same weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    config = AutoConfig.for_model(**ARCHITECTURE)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    finally:
        torch.random.set_rng_state(generator_state)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="where to write the model and its tokenizer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write_tiny_llama(args.folder, args.seed))


if __name__ == "__main__":
    main()
