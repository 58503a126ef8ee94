"""Triton Python-backend model, decoupled: a transformers causal language model answering with one response per
generated token, then a last response carrying the token counts and the final flag.

Inputs and outputs follow the names of Triton's generate extension as its TensorRT-LLM and vLLM backends use them:
`text_input` (BYTES), `max_tokens` (INT32), `ignore_eos` (BOOL, optional), and `apply_chat_template` (BOOL, optional:
`text_input` is then a conversation, a JSON list of {"role", "content"}, rendered by the tokenizer's chat template);
outputs `text_output` (BYTES, the text the token completed: empty while a character's bytes are incomplete),
`num_input_tokens` and `num_output_tokens` (UINT32, on the last response, as the vLLM backend names them).

The requests Triton's dynamic batcher hands one `execute` (those queued within `max_queue_delay_microseconds`, up to
`max_batch_size`) are generated together, greedily, one forward pass per token for all of them: a request arriving
meanwhile waits for the next batch (static batching). Each request stops at its own `max_tokens`, or at the
end-of-sequence token unless `ignore_eos`; a request whose client went away stops sending.

Its parameters (config.pbtxt, written by serving/triton_stream/repository.py): `model_folder` (Hugging Face layout),
`random_weights` (initialise from the config with `seed` instead of loading weights), `dtype`. Runs inside Triton's
stub process: standard library, numpy, torch and transformers only (PYTHONPATH is ignored there).
"""

import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PLAIN_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant: "


def _input(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        folder = parameters["model_folder"]
        if args.get("model_instance_kind") == "GPU":
            self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        else:
            self.device = torch.device("cpu")
        dtype = parameters.get("dtype", "auto")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.type == "cuda" else "float32"
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if parameters.get("random_weights") == "true":
            generator_state = torch.random.get_rng_state()
            try:
                torch.manual_seed(int(parameters.get("seed", "0")))
                self.model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=DTYPES[dtype])
            finally:
                torch.random.set_rng_state(generator_state)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype])
        self.model.to(self.device).eval()
        self.eos = self.tokenizer.eos_token_id
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (self.eos or 0)
        self.logger = pb_utils.Logger
        with torch.inference_mode():  # the first forward pass's one-off costs, before the server says ready
            self._forward(torch.tensor([[self.pad]], device=self.device), torch.ones(1, 1, dtype=torch.long,
                                                                                      device=self.device), None)

    def _prompt(self, request):
        text = _input(request, "text_input", b"")
        text = text.decode() if isinstance(text, bytes) else str(text)
        if bool(_input(request, "apply_chat_template", False)):
            messages = json.loads(text)
            template = None if getattr(self.tokenizer, "chat_template", None) else PLAIN_TEMPLATE
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                      chat_template=template)
            return self.tokenizer.encode(text, add_special_tokens=False)
        return self.tokenizer.encode(text)

    def _forward(self, input_ids, attention_mask, past):
        positions = attention_mask.long().cumsum(-1) - 1
        positions.masked_fill_(attention_mask == 0, 0)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=positions[:, -input_ids.shape[1]:], past_key_values=past, use_cache=True)
        return out.logits[:, -1, :], out.past_key_values

    def execute(self, requests):
        rows, senders = [], []
        for request in requests:
            sender = request.get_response_sender()
            try:
                ids = self._prompt(request)
                max_tokens = int(_input(request, "max_tokens", 16))
                if max_tokens < 1:
                    raise ValueError(f"max_tokens={max_tokens}: ask for at least one token")
                rows.append({"ids": ids, "left": max_tokens, "ignore_eos": bool(_input(request, "ignore_eos", False)),
                             "out": [], "prefix": 0, "read": 0, "done": False})
                senders.append(sender)
            except Exception as error:  # noqa: BLE001 - the request's own fault, answered as its error
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(error).__name__}: {error}")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if rows:
            try:
                self._generate(rows, senders)
            except Exception as error:  # noqa: BLE001 - every request still waiting gets the error
                for row, sender in zip(rows, senders, strict=True):
                    if not row["done"]:
                        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))),
                                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _generate(self, rows, senders):
        longest = max(len(row["ids"]) for row in rows)
        input_ids = torch.tensor([[self.pad] * (longest - len(r["ids"])) + r["ids"] for r in rows], device=self.device)
        mask = torch.tensor([[0] * (longest - len(r["ids"])) + [1] * len(r["ids"]) for r in rows], device=self.device)
        suppress = torch.tensor([r["ignore_eos"] for r in rows], device=self.device)
        past = None
        with torch.inference_mode():
            while not all(row["done"] for row in rows):
                logits, past = self._forward(input_ids, mask, past)
                if self.eos is not None:
                    logits[suppress, self.eos] = float("-inf")
                tokens = logits.argmax(dim=-1)
                for row, sender, token in zip(rows, senders, tokens.tolist(), strict=True):
                    if not row["done"]:
                        self._step(row, sender, token)
                input_ids = tokens[:, None]
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)

    def _step(self, row, sender, token):
        """Send the token's text (the text it completed), or, at its end, the counts and the final flag."""
        if sender.is_cancelled():
            row["done"] = True
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if token == self.eos and not row["ignore_eos"]:
            self._finish(row, sender)
            return
        row["out"].append(token)
        row["left"] -= 1
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([self._new_text(row).encode()],
                                                                                           dtype=np.object_))]))
        if row["left"] <= 0:
            self._finish(row, sender)

    def _new_text(self, row):
        """The text the latest token completed, decoded incrementally as vLLM and TGI do (a window from the last
        token that completed text, so a token's leading space survives): empty while a character's bytes are
        incomplete."""
        out, prefix, read = row["out"], row["prefix"], row["read"]
        before = self.tokenizer.decode(out[prefix:read], skip_special_tokens=False)
        now = self.tokenizer.decode(out[prefix:], skip_special_tokens=False)
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return ""
        row["prefix"], row["read"] = read, len(out)
        return now[len(before):]

    def _finish(self, row, sender):
        row["done"] = True
        response = pb_utils.InferenceResponse([
            pb_utils.Tensor("text_output", np.array([b""], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([len(row["ids"])], dtype=np.uint32)),
            pb_utils.Tensor("num_output_tokens", np.array([len(row["out"])], dtype=np.uint32))])
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        self.model = None
