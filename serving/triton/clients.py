"""Triton's clients: the Open Inference Protocol over sockets (`serving.oip.clients`, which every OIP server shares),
and Triton's shared-memory transport on top of it.

Shared memory (`TritonClientSpec.shared_memory` = system | cuda, perf_analyzer's `--shared-memory`): the inputs of
every request of the pool are written once, one after another, into a registered region and each request names its
own part of it; every request in flight gets its own output region
(a pool grows to the concurrency), so concurrent responses never overwrite each other. `close()` unregisters and
frees every region. Those calls go through `tritonclient`'s aio clients, which register regions.

The compiled load engine sends bytes over sockets: for it the regions are made and registered here first
(`open_wire`), then its requests are built naming them, as perf_analyzer's `--shared-memory` does. Each request it
sends names its input's part of the input region and one of the output regions, as many as requests may be in
flight up to MAX_WIRE_OUTPUTS, in turn (the bodies are whole pools, so the inputs still go round in turn). Requests
in flight share an output region only beyond that count or where responses came back far out of order, which
changes no figure: the server writes each answer whole, and the outputs are not read back (the first response's
shape is checked).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from serving.clients.base import ClientSpec, ServerReport
from serving.clients.wire import grpc_message
from serving.oip.clients import HEADER_LENGTH, OipClient, OipGrpcClient, OipHttpClient
from serving.triton.shm import Region, new_region, remove_stale_regions

log = logging.getLogger(__name__)

# The compiled engine's output regions at most: a closed loop of up to this many in flight gets one per request; an
# open loop (up to experiment.max_in_flight outstanding) shares them beyond (one region per answer is 4 KB per image).
MAX_WIRE_OUTPUTS = 64


@dataclass(frozen=True)
class TritonClientSpec(ClientSpec):
    # "system" | "cuda": pass tensors through shared-memory regions instead of the socket (client on the server's
    # machine); "none": through the socket.
    shared_memory: str = "none"


def shared_memory_of(spec: ClientSpec) -> str:
    return getattr(spec, "shared_memory", "none")


class InputPart(NamedTuple):
    """One request's input in the input region: where it lies and what it is."""

    region: str
    shape: list[int]
    datatype: str
    byte_size: int
    offset: int


class SharedMemoryClient(OipClient):
    """The shared-memory path of a Triton client; the socket path is the OIP client's (next in the MRO). Subclasses
    give the tritonclient aio client and its tensor descriptors."""

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        self._output_bytes = spec.batch_size * math.prod(spec.output_shape) * 4
        self._client: Any = None
        self._input_region: Region | None = None
        self._free_outputs: list[Region] = []
        self._all_outputs: list[Region] = []
        self._parts: list[InputPart] = []
        self._wire_outputs: list[Region] = []  # the compiled engine's requests' output regions, in body order

    def _connect(self) -> Any:
        """The aio client (region registration and requests naming regions)."""
        raise NotImplementedError

    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        raise NotImplementedError

    def _requested_output(self, name: str) -> Any:
        raise NotImplementedError

    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any:
        raise NotImplementedError

    def _shm_request_bytes(self, part: InputPart, output: Region) -> bytes:
        """A request (as `_request_bytes` builds them) whose input is `part` of the input region and whose output
        goes to `output`."""
        raise NotImplementedError

    def _wire_output_shape(self, body: bytes) -> tuple[int, ...]:
        """The output's shape a response to `_shm_request_bytes` reports (its data is in the region)."""
        raise NotImplementedError

    async def open(self) -> None:
        if shared_memory_of(self.spec) == "none":
            await super().open()
            return
        self._inputs = [self._shm_input(part) for part in await self._open_input_region()]

    def _shm_input(self, part: InputPart) -> Any:
        """The tritonclient input descriptor naming `part` of the input region."""
        infer_input = self._infer_input(self.spec.input_name, part.shape, part.datatype)
        infer_input.set_shared_memory(part.region, part.byte_size, part.offset)
        return infer_input

    def _shm_output(self, region: Region) -> Any:
        """The tritonclient output descriptor asking for the answer in `region`."""
        output = self._requested_output(self.spec.output_name)
        output.set_shared_memory(region.name, self._output_bytes)
        return output

    async def open_wire(self, max_in_flight: int) -> None:
        if shared_memory_of(self.spec) == "none":
            return
        self._parts = await self._open_input_region()
        outputs = max(1, min(max_in_flight, MAX_WIRE_OUTPUTS))
        self._wire_outputs = [await self._new_output_region() for _ in range(outputs)]

    def _all_request_bytes(self) -> list[bytes]:
        """Whole pools, enough that consecutive requests up to the output regions' count name distinct ones."""
        if not self._wire_outputs:
            return super()._all_request_bytes()
        inputs, outputs = len(self._parts), len(self._wire_outputs)
        count = inputs * math.ceil(outputs / inputs)
        return [self._shm_request_bytes(self._parts[i % inputs], self._wire_outputs[i % outputs])
                for i in range(count)]

    def wire_output(self, body: int) -> np.ndarray:
        """What the server last wrote into the output region the compiled engine's request body `body` names (read
        whole; with more bodies than regions, others name it too): over shared memory no answer crosses the socket."""
        region = self._wire_outputs[body % len(self._wire_outputs)]
        return region.read(np.float32, (self.spec.batch_size, *self.spec.output_shape))

    def check_wire_response(self, body: bytes) -> None:
        if not self._wire_outputs:
            super().check_wire_response(body)
            return
        self.check_output_shape(self._wire_output_shape(body))

    async def _open_input_region(self) -> list[InputPart]:
        """Connect, and write every request's input of the pool into one registered region; each one's part."""
        tensors = [self.oip_tensor(inputs) for inputs in self.pool]
        self._client = self._connect()
        remove_stale_regions()
        self._input_region = new_region(shared_memory_of(self.spec), sum(len(t.raw) for t in tensors))
        self._input_region.write(b"".join(t.raw for t in tensors))
        await self._register(self._input_region)
        parts, offset = [], 0
        for tensor in tensors:
            parts.append(InputPart(self._input_region.name, tensor.shape, tensor.datatype, len(tensor.raw), offset))
            offset += len(tensor.raw)
        return parts

    async def _register(self, region: Region) -> None:
        try:
            await region.register(self._client)
        except Exception as exc:
            raise RuntimeError(f"the server could not map {region.kind} shared-memory region {region.name}: {exc} "
                               "(shared memory needs the client on the server's machine"
                               f"{' and GPU' if region.kind == 'cuda' else ''})") from exc

    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        if self._input_region is None:
            return await super().call(index)
        name = self.spec.output_name
        region = self._free_outputs.pop() if self._free_outputs else await self._new_output_region()
        try:
            result = await self._send([self._inputs[index]], [self._shm_output(region)])
            return region.read(np.float32, self._output_shape(result, name)), None
        finally:
            self._free_outputs.append(region)

    async def _new_output_region(self) -> Region:
        region = new_region(shared_memory_of(self.spec), self._output_bytes)
        self._all_outputs.append(region)
        await self._register(region)
        return region

    async def close(self) -> None:
        regions = [r for r in (self._input_region, *self._all_outputs) if r is not None]
        self._input_region, self._free_outputs, self._all_outputs, self._wire_outputs = None, [], [], []
        try:
            await super().close()
            if self._client is not None:
                for region in regions:
                    try:
                        await region.unregister(self._client)
                    except Exception as exc:  # noqa: BLE001 - the server may be gone; the region is freed below
                        log.warning("could not unregister shared-memory region %s from the server: %s",
                                    region.name, exc)
                await self._client.close()
        finally:
            self._client = None
            for region in regions:
                region.destroy()


class TritonHttpClient(SharedMemoryClient, OipHttpClient):
    """Triton over HTTP: binary tensors through the socket (the OIP client), or shared memory
    (`tritonclient.http.aio`)."""

    def _connect(self) -> Any:
        import tritonclient.http.aio as http_aio

        return http_aio.InferenceServerClient(self.spec.url, conn_timeout=self.spec.timeout_s)

    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        import tritonclient.http as http

        return http.InferInput(name, shape, datatype)

    def _requested_output(self, name: str) -> Any:
        import tritonclient.http as http

        return http.InferRequestedOutput(name, binary_data=True)

    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in result.get_output(name)["shape"])

    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any:
        return await self._client.infer(self.spec.model_name, inputs, outputs=outputs)

    def _shm_request_bytes(self, part: InputPart, output: Region) -> bytes:
        """tritonclient's own JSON body for the descriptors the Python path sends (no binary data follows)."""
        import tritonclient.http as http

        body, json_size = http.InferenceServerClient.generate_request_body([self._shm_input(part)],
                                                                          outputs=[self._shm_output(output)])
        headers = {"Content-Type": "application/json"}
        if json_size is not None:
            headers[HEADER_LENGTH] = str(json_size)
        return self._post(body, headers)

    def _wire_output_shape(self, body: bytes) -> tuple[int, ...]:
        outputs = {output["name"]: output for output in json.loads(body)["outputs"]}
        return tuple(int(n) for n in outputs[self.spec.output_name]["shape"])


class TritonGrpcClient(SharedMemoryClient, OipGrpcClient):
    """Triton over gRPC: the prepared ModelInferRequest through the socket (the OIP client), or shared memory
    (`tritonclient.grpc.aio`)."""

    def _connect(self) -> Any:
        import tritonclient.grpc.aio as grpc_aio

        return grpc_aio.InferenceServerClient(self.spec.url)

    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any:
        import tritonclient.grpc as grpc

        return grpc.InferInput(name, shape, datatype)

    def _requested_output(self, name: str) -> Any:
        import tritonclient.grpc as grpc

        return grpc.InferRequestedOutput(name)

    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in result.get_output(name).shape)

    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any:
        return await self._client.infer(self.spec.model_name, inputs, outputs=outputs,
                                        client_timeout=self.spec.timeout_s)

    def _shm_request_bytes(self, part: InputPart, output: Region) -> bytes:
        """The serialized ModelInferRequest with the tensors named by region, the parameters tritonclient's
        `set_shared_memory` sets (no raw_input_contents): tritonclient.grpc serializes its descriptors only in
        private helpers, so the message is built here, as `OipGrpcClient._request_bytes` builds its own."""
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest(
            model_name=self.spec.model_name,
            inputs=[service_pb2.ModelInferRequest.InferInputTensor(
                name=self.spec.input_name, datatype=part.datatype, shape=part.shape)],
            outputs=[service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=self.spec.output_name)])
        tensor, requested = request.inputs[0], request.outputs[0]
        tensor.parameters["shared_memory_region"].string_param = part.region
        tensor.parameters["shared_memory_byte_size"].int64_param = part.byte_size
        if part.offset:
            tensor.parameters["shared_memory_offset"].int64_param = part.offset
        requested.parameters["shared_memory_region"].string_param = output.name
        requested.parameters["shared_memory_byte_size"].int64_param = self._output_bytes
        return request.SerializeToString()

    def _wire_output_shape(self, body: bytes) -> tuple[int, ...]:
        response = self.response_type().FromString(grpc_message(body))
        outputs = {output.name: output for output in response.outputs}
        return tuple(int(n) for n in outputs[self.spec.output_name].shape)
