"""The Ray Serve deployment: a language model in transformers answering the OpenAI API (`/v1/models`,
`/v1/chat/completions`, `/v1/completions`, streamed as server-sent events or whole), every token sent as it is
generated. Requests are merged by Serve's `@serve.batch` (or, with `batcher: when_free`, as Triton merges them:
serving/serve_transformers/when_free.py) into one `generate` (`serving.generation.
transformers_engine`), which runs on one worker thread while the event loop streams the tokens out. (No postponed
annotations here: FastAPI reads the routes' annotations as objects.)"""

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from serving.generation.transformers_engine import StepStreamer, TransformersGenerator
from serving.serve_transformers.when_free import WhenFreeGenerator
from serving.workloads.generative.model import LanguageModelConfig

api = FastAPI()
APP_BUILDER = "serving.serve_transformers.deployment:app_builder"


@dataclass
class Job:
    """One request's share of a batch: its prompt, how many tokens it wants, whether an end-of-sequence ends it."""

    prompt: list[int]
    max_tokens: int
    stop_at_eos: bool


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)


def _event(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class _Answer:
    """What one answer said so far, in the OpenAI API's shapes."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int) -> None:
        self.chat, self.model, self.prompt_tokens = chat, model, prompt_tokens
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        self.created = int(time.time())
        self.parts: list[str] = []
        self.stopped = False

    def add(self, text: str, end_of_sequence: bool) -> None:
        self.parts.append(text)
        self.stopped = self.stopped or end_of_sequence

    @property
    def finish_reason(self) -> str:
        return "stop" if self.stopped else "length"

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
        return {"index": 0, "text": text, "finish_reason": finish}

    def chunk(self, text: str, finish: bool = False) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": [self._choice(text, self.finish_reason if finish else None)]}

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": len(self.parts),
                "total_tokens": self.prompt_tokens + len(self.parts)}

    def usage_chunk(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [],
                "usage": self.usage()}

    def whole(self) -> dict[str, Any]:
        text = "".join(self.parts)
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if self.chat
                  else {"index": 0, "text": text})
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model,
                "choices": [{**choice, "finish_reason": self.finish_reason}], "usage": self.usage()}


@serve.deployment
@serve.ingress(api)
class TransformersLanguageModel:
    def __init__(self, model: dict[str, Any], device: str = "cpu", dtype: str = "auto",
                 torch_threads: int | None = None, max_batch_size: int = 8,
                 batch_wait_timeout_s: float = 0.01, batcher: str = "serve") -> None:
        started = time.perf_counter()
        self.config = LanguageModelConfig(**model)
        self.engine = TransformersGenerator(self.config, device, dtype, torch_threads)
        self.max_batch_size = int(max_batch_size)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        if batcher == "when_free":
            self.generate_batch = WhenFreeGenerator(self._generate_batch, self.max_batch_size,
                                                    float(batch_wait_timeout_s)).submit
        else:
            self.generate_batch = serve.batch(max_batch_size=self.max_batch_size,
                                              batch_wait_timeout_s=float(batch_wait_timeout_s))(self._generate_batch)
        self.load_s = time.perf_counter() - started
        # Cumulative, read around each window (`counters`): generates run, conversations and tokens they served, and
        # the seconds they took
        self.totals = {"batches": 0.0, "conversations": 0.0, "tokens": 0.0, "generate_s": 0.0}
        started = time.perf_counter()
        for batch in sorted({1, self.max_batch_size}):  # the first pass of each shape outside any window
            self.engine.generate([self.engine.text_ids("warm up")] * batch, 4)
        self.warmup_s = time.perf_counter() - started

    def info(self) -> dict[str, Any]:
        import ray
        import torch

        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": context.get_node_id(), "device": self.engine.device,
                "dtype": self.engine.dtype, "gpu_ids": [str(g) for g in context.get_accelerator_ids().get("GPU", [])],
                "torch_threads": torch.get_num_threads(), "load_s": self.load_s, "warmup_s": self.warmup_s}

    def counters(self) -> dict[str, float]:
        return dict(self.totals)

    async def _generate_batch(self, jobs: list[Job]) -> AsyncIterator[list[Any]]:
        """One `generate` for every job Serve queued together; each step yields each job's token (StopIteration once
        it has its tokens, or its end of sequence)."""
        loop = asyncio.get_running_loop()
        steps: asyncio.Queue[list[int] | None] = asyncio.Queue()
        streamer = StepStreamer(lambda ids: loop.call_soon_threadsafe(steps.put_nowait, ids), lambda: None)

        def run() -> None:
            try:
                self.engine.generate([job.prompt for job in jobs], max(job.max_tokens for job in jobs), streamer)
            finally:  # the end, whether generate finished or raised
                loop.call_soon_threadsafe(steps.put_nowait, None)

        started = time.perf_counter()
        running = loop.run_in_executor(self.executor, run)
        served = [0] * len(jobs)
        finished = [False] * len(jobs)
        while (ids := await steps.get()) is not None:
            out: list[Any] = []
            for row, job in enumerate(jobs):
                if finished[row]:
                    out.append(StopIteration)
                    continue
                served[row] += 1
                finished[row] = served[row] >= job.max_tokens or (job.stop_at_eos and ids[row] == self.engine.eos_id)
                out.append(ids[row])
            yield out
            if all(finished):
                break
        await running  # its error, if generate raised
        self.totals["batches"] += 1
        self.totals["conversations"] += len(jobs)
        self.totals["tokens"] += sum(served)
        self.totals["generate_s"] += time.perf_counter() - started
        if not all(finished):
            yield [StopIteration] * len(jobs)

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.config.name, "object": "model", "owned_by": "tierbench"}]}

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Any:
        return await self._answer(request, chat=True)

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        return await self._answer(request, chat=False)

    async def _answer(self, request: Request, chat: bool) -> Any:
        try:
            body = await request.json()
            if body.get("model") != self.config.name:
                return _error(404, f"the model {body.get('model')!r} does not exist: this server serves "
                                   f"{self.config.name!r}")
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            prompt = self.engine.chat_ids(body["messages"]) if chat else self.engine.text_ids(str(body["prompt"]))
        except (ValueError, KeyError, TypeError) as error:
            return _error(400, f"a request tierbench's server cannot read: {type(error).__name__}: {error}")
        if max_tokens < 1:
            return _error(400, f"max_tokens={max_tokens}: at least 1")
        pinned = bool(body.get("ignore_eos")) or int(body.get("min_tokens") or 0) >= max_tokens
        job = Job(prompt, max_tokens, stop_at_eos=not pinned)
        answer = _Answer(chat, self.config.name, len(prompt))
        if not body.get("stream"):
            async for token in self.generate_batch(job):
                answer.add(self.engine.decode(token), token == self.engine.eos_id and job.stop_at_eos)
            return JSONResponse(answer.whole())
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._stream(job, answer, usage), media_type="text/event-stream")

    async def _stream(self, job: Job, answer: _Answer, usage: bool) -> AsyncIterator[bytes]:
        async for token in self.generate_batch(job):
            text = self.engine.decode(token)
            answer.add(text, token == self.engine.eos_id and job.stop_at_eos)
            yield _event(answer.chunk(text))
        yield _event(answer.chunk("", finish=True))
        if usage:
            yield _event(answer.usage_chunk())
        yield _event("[DONE]")


def app_builder(args: dict[str, Any]) -> Any:
    """The application a Serve config's `import_path` names (`APP_BUILDER`), built with its `args`."""
    return TransformersLanguageModel.bind(**args)
