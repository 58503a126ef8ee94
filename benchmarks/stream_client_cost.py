"""The generative client's own cost: CPU microseconds per streamed chunk, the whole client counted (the load's
request loops, the HTTP/1.1 stream reader, the answer's parse, its token trace), against a loopback server that
streams pre-built chat events, one per token, at a set pace per stream (or as fast as it can: `--itl-ms 0`). The
goal: at most 25 µs per chunk, so one client core keeps 40,000 tokens/s honest.

    python benchmarks/stream_client_cost.py [--concurrency 1 8 64] [--itl-ms 1.0] [--tokens 64] [--seconds 5]

The server runs in a process of its own (uvloop, an asyncio.Protocol: each token its own write, on its deadline);
the client in this one, its CPU read from the process's own clock over the measured span. Prints a table and writes
benchmarks/results/stream_client_cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from serving.process import free_ports, stop_process_group, wait_until  # noqa: E402

GOAL_US = 25.0


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(message: dict | str) -> bytes:
    return _chunk(f"data: {message if isinstance(message, str) else json.dumps(message)}\n\n".encode())


class _Streamer(asyncio.Protocol):
    """Answers every request with `tokens` chat events, token k at the request's arrival + (k + 1) x `itl_s`."""

    def __init__(self, tokens: int, itl_s: float) -> None:
        self.tokens, self.itl_s = tokens, itl_s
        self.buffer = b""
        self.token = _event({"id": "x", "object": "chat.completion.chunk", "model": "stub",
                             "choices": [{"index": 0, "delta": {"content": " tok"}}]})
        self.tail = (_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
                     + _event({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens,
                                                        "total_tokens": tokens + 8}})
                     + _event("[DONE]") + b"0\r\n\r\n")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        length = int(next(line.split(b":")[1] for line in self.buffer[:end].split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        if len(self.buffer) < end + 4 + length:
            return
        self.buffer = self.buffer[end + 4 + length:]
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + _event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        asyncio.get_running_loop().create_task(self._stream())

    async def _stream(self) -> None:
        """One task per answer, each token written when due (by the loop's clock, never earlier), in order: timers
        due at nearly the same moment may run in any order, a task's steps cannot."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k in range(self.tokens):
            delay = start + (k + 1) * self.itl_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.transport.is_closing():
                return
            self.transport.write(self.token if k < self.tokens - 1 else self.token + self.tail)


def serve(port: int, tokens: int, itl_s: float) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: _Streamer(tokens, itl_s), "127.0.0.1", port)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def measure(url: str, concurrency: int, seconds: float) -> dict[str, float]:
    """The whole client (closed loop of `concurrency` streams) for `seconds` after a warm-up: its CPU per chunk."""
    from experiments.measure.load import ClosedLoopLoad
    from serving.clients import http1
    from serving.workloads.generative.client import OpenAIClient, OpenAISpec
    from serving.workloads.generative.prompts import LengthSpec, PromptSource

    calls = [0]
    received = http1._StreamConnection.data_received

    def counted(self, data: bytes) -> None:
        calls[0] += 1
        received(self, data)

    http1._StreamConnection.data_received = counted
    source = PromptSource(input_tokens=LengthSpec(16.0), output_tokens=LengthSpec(64.0), conversations=64)
    spec = OpenAISpec(target="", url=url, model_name="stub", input_format="chat_stream", batch_size=1, input_shape=(),
                      output_shape=(), inputs=source, timeout_s=30.0)

    async def run() -> dict[str, float]:
        client = OpenAIClient(spec)
        await client.open()
        load = ClosedLoopLoad(client.infer, concurrency, timeout_s=30.0, images_per_request=1)
        load.start()
        await load.wait_warm(concurrency * 2, 1.0, 60.0)
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        start, cpu0, calls0 = load.now(), time.process_time(), calls[0]
        window = await load.collect(start, start + seconds)
        cpu, packets = time.process_time() - cpu0, calls[0] - calls0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        user, system = usage.ru_utime - usage0.ru_utime, usage.ru_stime - usage0.ru_stime
        await load.stop()
        await client.close()
        chunks = sum(t.output_after_s.size for t in window.completed_detail)
        span = load.now() - start
        per_chunk = 1e6 * (window.duration_s / span) / max(chunks, 1)  # the CPU over the span, per chunk in the window
        return {"chunks_s": chunks / window.duration_s, "client_cpu_cores": cpu / span,
                "cpu_us_per_chunk": cpu * per_chunk, "user_us_per_chunk": user * per_chunk,
                "kernel_us_per_chunk": system * per_chunk,
                "chunks_per_read": chunks / max(packets, 1), "ttft_p50_ms": float(
                    sorted(t.first_token_after_s for t in window.detail)[len(window.detail) // 2] * 1e3),
                "answers": float(window.completed), "errors": float(window.failures.count)}

    try:
        import uvloop
        return uvloop.run(run())
    except ImportError:
        return asyncio.run(run())
    finally:
        http1._StreamConnection.data_received = received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--itl-ms", type=float, default=1.0, help="the server's pace per stream (0: flat out)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--name", default="stream_client_cost")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server's own process
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.tokens, args.itl_ms / 1e3)
        return
    rows = []
    for concurrency in args.concurrency:
        port = free_ports(1)[0]
        log = open(os.devnull, "w")  # noqa: SIM115 - the server's output is not needed
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--tokens", str(args.tokens),
                                   "--itl-ms", str(args.itl_ms)], stdout=subprocess.PIPE, stderr=log,
                                  start_new_session=True)
        try:
            wait_until(lambda s=server: s.stdout.readline().strip() == b"ready", 30, lambda s=server: s.poll() is None,
                       "the streaming server")
            row = {"concurrency": concurrency, "itl_ms": args.itl_ms, "tokens": args.tokens,
                   **measure(f"http://127.0.0.1:{port}", concurrency, args.seconds)}
        finally:
            stop_process_group(server, 5)
            log.close()
        row["goal_met"] = row["cpu_us_per_chunk"] <= GOAL_US
        rows.append(row)
    report(args.name, ["concurrency", "itl_ms", "chunks_s", "client_cpu_cores", "cpu_us_per_chunk", "user_us_per_chunk",
                       "kernel_us_per_chunk", "chunks_per_read",
                       "ttft_p50_ms", "answers", "errors", "goal_met"], rows,
           {"goal_us_per_chunk": GOAL_US, "seconds": args.seconds})


if __name__ == "__main__":
    main()
