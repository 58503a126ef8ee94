"""What Triton's HTTP and gRPC clients share: the request (float32 tensor, or JPEG bytes for the `<model>_jpeg`
ensemble), and the transport of its tensors (in the request body, or in shared-memory regions).

Inputs: `tensor` sends FP32 [B, C, H, W]; `jpeg` sends BYTES [B, 1], one encoded image per row (the ensemble
decodes and preprocesses on the server). `payload_bytes` counts the image data (the float32 tensor, or the
JPEG files), as for every other client, so payloads compare across backends.

Through the socket (`spec.shared_memory` = none) the request is built once, with tritonclient's own protocol
code, and the same bytes are sent every time (as perf_analyzer does; tritonclient's aio `infer` rebuilds the
~600 KB request on every call): subclasses implement `_open_prepared` / `_send_prepared`.

Shared memory (`spec.shared_memory` = system | cuda): the input is written once into a registered region and
each request names it; every request in flight gets its own output region (a pool grows to the concurrency),
so concurrent responses never overwrite each other. `close()` unregisters and frees every region.
"""

from __future__ import annotations

import logging
import math
from abc import abstractmethod
from typing import Any

import numpy as np

from serving.clients.base import ClientSpec, InferenceClient, ServerReport, jpeg_batch, tensor_batch
from serving.clients.shm import Region, new_region, remove_stale_regions, serialize_bytes
from serving.protocols import InputFormat

log = logging.getLogger(__name__)


class TritonClient(InferenceClient):
    """Base of the HTTP and gRPC clients; subclasses create the aio client and tensor descriptors."""

    def __init__(self, spec: ClientSpec) -> None:
        super().__init__(spec)
        if spec.input_format == InputFormat.JPEG:
            images = jpeg_batch(spec)
            self._data = np.array(images, dtype=np.object_).reshape(-1, 1)
            self._datatype = "BYTES"
            self._raw = serialize_bytes(images)
            self._payload_bytes = sum(len(image) for image in images)
        elif spec.input_format == InputFormat.TENSOR:
            self._data = tensor_batch(spec)
            self._datatype = "FP32"
            self._raw = self._data.tobytes()
            self._payload_bytes = self._data.nbytes
        else:
            raise ValueError(f"{type(self).__name__}: input format {spec.input_format!r} (use tensor or jpeg)")
        self._output_bytes = spec.batch_size * math.prod(spec.output_shape) * 4
        self._client: Any = None
        self._input_region: Region | None = None
        self._free_outputs: list[Region] = []
        self._all_outputs: list[Region] = []

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    @abstractmethod
    def _connect(self) -> Any:
        """The aio client (shared-memory path: region registration and requests naming regions)."""

    @abstractmethod
    async def _open_prepared(self) -> None:
        """Build the request of `self._inputs` / `self._outputs` once and open a connection to send it."""

    @abstractmethod
    async def _send_prepared(self) -> tuple[np.ndarray, ServerReport | None]:
        """Send the prepared request; the logits, and what the server reported about it (Server-Timing)."""

    @abstractmethod
    async def _close_prepared(self) -> None: ...

    @abstractmethod
    def _infer_input(self, name: str, shape: list[int], datatype: str) -> Any: ...

    @abstractmethod
    def _set_input_data(self, infer_input: Any, data: np.ndarray) -> None: ...

    @abstractmethod
    def _requested_output(self, name: str) -> Any: ...

    @abstractmethod
    def _output_shape(self, result: Any, name: str) -> tuple[int, ...]: ...

    @abstractmethod
    async def _send(self, inputs: list[Any], outputs: list[Any]) -> Any: ...

    @classmethod
    def wire_unsupported(cls, spec: ClientSpec) -> str | None:
        if spec.shared_memory != "none":
            return (f"{spec.shared_memory} shared memory: the regions are created and registered by the Python "
                    "client (experiment.load_engine=python, or auto, measures these protocols)")
        return None

    def _prepare_inputs(self) -> None:
        """The request's tensors, carrying the data (the socket path)."""
        spec = self.spec
        self._inputs = [self._infer_input(spec.input_name, list(self._data.shape), self._datatype)]
        self._set_input_data(self._inputs[0], self._data)
        self._outputs = [self._requested_output(spec.output_name)]

    async def open(self) -> None:
        spec = self.spec
        if spec.shared_memory == "none":
            self._prepare_inputs()
            await self._open_prepared()
            return
        self._inputs = [self._infer_input(spec.input_name, list(self._data.shape), self._datatype)]
        self._client = self._connect()
        remove_stale_regions()
        self._input_region = new_region(spec.shared_memory, len(self._raw))
        self._input_region.write(self._raw)
        await self._register(self._input_region)
        self._inputs[0].set_shared_memory(self._input_region.name, len(self._raw))

    async def _register(self, region: Region) -> None:
        try:
            await region.register(self._client)
        except Exception as exc:
            raise RuntimeError(f"the server could not map {region.kind} shared-memory region {region.name}: {exc} "
                               "(shared memory needs the client on the server's machine"
                               f"{' and GPU' if region.kind == 'cuda' else ''})") from exc

    async def call(self) -> tuple[np.ndarray, ServerReport | None]:
        # Triton reports nothing per request (its server-side time comes from its metrics endpoint); Ray Serve's
        # replica does (Server-Timing).
        name = self.spec.output_name
        if self._input_region is None:
            return await self._send_prepared()
        region = self._free_outputs.pop() if self._free_outputs else await self._new_output_region()
        try:
            output = self._requested_output(name)
            output.set_shared_memory(region.name, self._output_bytes)
            result = await self._send(self._inputs, [output])
            return region.read(np.float32, self._output_shape(result, name)), None
        finally:
            self._free_outputs.append(region)

    async def _new_output_region(self) -> Region:
        region = new_region(self.spec.shared_memory, self._output_bytes)
        self._all_outputs.append(region)
        await self._register(region)
        return region

    async def close(self) -> None:
        regions = [r for r in (self._input_region, *self._all_outputs) if r is not None]
        self._input_region, self._free_outputs, self._all_outputs = None, [], []
        try:
            await self._close_prepared()
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
