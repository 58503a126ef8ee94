"""Triton's clients: the Open Inference Protocol over sockets (`serving.oip.clients`, which every OIP server shares),
and Triton's shared-memory transport on top of it.

Shared memory (`TritonClientSpec.shared_memory` = system | cuda, perf_analyzer's `--shared-memory`): the inputs of
every request of the pool are written once, one after another, into a registered region and each request names its
own part of it; every request in flight gets its own output region
(a pool grows to the concurrency), so concurrent responses never overwrite each other. `close()` unregisters and
frees every region. Those calls go through `tritonclient`'s aio clients, which register regions; the compiled load
engine, which sends bytes over sockets, cannot drive them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from serving.clients.base import ClientSpec, ServerReport
from serving.oip.clients import OipClient, OipGrpcClient, OipHttpClient
from serving.triton.shm import Region, new_region, remove_stale_regions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TritonClientSpec(ClientSpec):
    # "system" | "cuda": pass tensors through shared-memory regions instead of the socket (client on the server's
    # machine); "none": through the socket.
    shared_memory: str = "none"


def shared_memory_of(spec: ClientSpec) -> str:
    return getattr(spec, "shared_memory", "none")


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

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        if shared_memory_of(spec) != "none":
            return (f"{shared_memory_of(spec)} shared memory: the regions are created and registered by the Python "
                    "client (experiment.load_engine=python, or auto, measures these protocols)")
        return super().wire_unsupported(spec)

    async def open(self) -> None:
        kind = shared_memory_of(self.spec)
        if kind == "none":
            await super().open()
            return
        tensors = [self.oip_tensor(inputs) for inputs in self.pool]
        self._client = self._connect()
        remove_stale_regions()
        self._input_region = new_region(kind, sum(len(t.raw) for t in tensors))
        self._input_region.write(b"".join(t.raw for t in tensors))
        await self._register(self._input_region)
        self._inputs, offset = [], 0
        for tensor in tensors:
            infer_input = self._infer_input(self.spec.input_name, tensor.shape, tensor.datatype)
            infer_input.set_shared_memory(self._input_region.name, len(tensor.raw), offset)
            self._inputs.append(infer_input)
            offset += len(tensor.raw)

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
            output = self._requested_output(name)
            output.set_shared_memory(region.name, self._output_bytes)
            result = await self._send([self._inputs[index]], [output])
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
        self._input_region, self._free_outputs, self._all_outputs = None, [], []
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
