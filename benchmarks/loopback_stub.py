"""A server that answers instantly, for the client's own ceiling: Triton's HTTP binary protocol and its gRPC
`ModelInfer`, each reply built once (1000 float32 logits, as the tiny model returns), the request read and
dropped. Whatever rate a client reaches against it is the client's limit, not a server's.

    python benchmarks/loopback_stub.py --http-port 18000 --grpc-port 18001

Runs until terminated; binds to 127.0.0.1. HTTP on uvloop with an `asyncio.Protocol` (no framework: a few µs per
request), gRPC on `grpc.aio` with a generic handler (no per-request protobuf work: the reply is pre-serialised).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal

import numpy as np

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
NUM_CLASSES = 1000


def http_reply() -> bytes:
    logits = np.zeros((1, NUM_CLASSES), np.float32).tobytes()
    header = json.dumps({"model_name": "stub", "model_version": "1", "outputs": [
        {"name": "logits", "datatype": "FP32", "shape": [1, NUM_CLASSES],
         "parameters": {"binary_data_size": len(logits)}}]}).encode()
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(header) + len(logits)}\r\n\r\n")
    return head.encode() + header + logits


def grpc_reply() -> bytes:
    from tritonclient.grpc import service_pb2

    return service_pb2.ModelInferResponse(
        model_name="stub", model_version="1",
        outputs=[service_pb2.ModelInferResponse.InferOutputTensor(name="logits", datatype="FP32",
                                                                   shape=[1, NUM_CLASSES])],
        raw_output_contents=[np.zeros((1, NUM_CLASSES), np.float32).tobytes()]).SerializeToString()


class StubHttp(asyncio.Protocol):
    """Keep-alive HTTP/1.1: reads each request's head and Content-Length body, answers the fixed reply."""

    reply = http_reply()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = bytearray()
        self.body_left = -1  # -1: reading a head

    def data_received(self, data: bytes) -> None:
        while data:
            if self.body_left > 0:  # body bytes are counted, never buffered
                taken = min(self.body_left, len(data))
                self.body_left -= taken
                data = data[taken:]
            if self.body_left == 0:
                self.body_left = -1
                self.transport.write(self.reply)
            if not data:
                return
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.body_left = 0
            for line in bytes(self.buffer[:end]).lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    self.body_left = int(line[15:])
            data = bytes(self.buffer[end + 4:])
            self.buffer.clear()
            if self.body_left == 0:
                self.body_left = -1
                self.transport.write(self.reply)


async def serve(http_port: int, grpc_port: int) -> None:
    import grpc

    reply = grpc_reply()

    async def model_infer(request: bytes, context: object) -> bytes:
        return reply

    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(model_infer)})  # bytes in, bytes out
    grpc_server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1)])
    grpc_server.add_generic_rpc_handlers((handler,))
    grpc_server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await grpc_server.start()
    # a client that falls behind opens connections in bursts: the default backlog (100) would reset them
    http_server = await asyncio.get_running_loop().create_server(StubHttp, "127.0.0.1", http_port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()
    http_server.close()
    await grpc_server.stop(None)


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.http_port, args.grpc_port))


if __name__ == "__main__":
    main()
