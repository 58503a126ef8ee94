"""A tiny random-weight Llama with its tokenizer, written locally in about a second (nothing downloaded): the model
the tests and the CPU examples serve (`transformers serve`, the stand-in) and count tokens with.

Its tokenizer is a word-level vocabulary of single characters (one token per character of printable ASCII), with a
chat template, so token counts are easy to reason about: "hello" is 5 tokens.

    python -m serving.workloads.generative.tiny_model DIR
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

NAME = "tiny-llama"
# A plain chat template: `role: content` lines, then the assistant's prompt.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
CONTEXT_TOKENS = 2048
SPECIAL = ("<unk>", "<s>", "</s>")


def vocabulary() -> dict[str, int]:
    """The special tokens, then every printable ASCII character (space and newline included), one token each."""
    vocab = {token: index for index, token in enumerate(SPECIAL)}
    for char in string.ascii_letters + string.digits + string.punctuation + " \n":
        vocab.setdefault(char, len(vocab))
    return vocab


def write_tiny_llama(folder: str | Path, seed: int = 0) -> Path:
    """Write the model (safetensors, config.json) and its tokenizer to `folder`; returns it. The same seed gives the
    same weights."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    vocab = vocabulary()
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   model_max_length=CONTEXT_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=CONTEXT_TOKENS,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"])
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="where to write the model and its tokenizer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write_tiny_llama(args.folder, args.seed))


if __name__ == "__main__":
    main()
