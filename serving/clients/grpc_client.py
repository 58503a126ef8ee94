"""What every inference client over gRPC shares (the Open Inference Protocol's, TorchServe's): one unary method on a
`grpc.aio` channel, its request messages (one per request of its pool) serialized once by its own code and sent as
those bytes (the channel has no request serializer), `spec.grpc_metadata` with each."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from serving.clients.base import PrebuiltRequestClient, ServerReport, authorization, grpc_credentials
from serving.clients.wire import WireRequest, grpc_message, grpc_wire


class GrpcInferenceClient(PrebuiltRequestClient):
    """Calls `method` at `spec.url` (host:port) with `_request_bytes(inputs)` (a serialized request message); subclasses
    build the request and read a response message's outputs (`response_outputs`)."""

    method: ClassVar[str]  # the method's path, e.g. /inference.GRPCInferenceService/ModelInfer
    _channel: Any = None

    @abstractmethod
    def response_type(self) -> Any:
        """The response message's class (its generated module imported here, when a client needs it)."""

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call carries: `spec.grpc_metadata`, and the credentials when the spec names them."""
        value = authorization(self.spec)
        return (*self.spec.grpc_metadata, *((("authorization", value),) if value else ()))

    def wire_request(self) -> WireRequest:
        return grpc_wire(self.spec.url, self.method, self._all_request_bytes(), self.metadata())

    def check_wire_response(self, body: bytes) -> None:
        self.check_logits(self.response_outputs(self.response_type().FromString(grpc_message(body))))

    async def open(self) -> None:
        import grpc

        self._requests = self._all_request_bytes()
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        if self.spec.tls:
            self._channel = grpc.aio.secure_channel(self.spec.url, grpc_credentials(self.spec), options)
        else:
            self._channel = grpc.aio.insecure_channel(self.spec.url, options=options)
        self._metadata = self.metadata()
        # No request serializer: the request goes out as the bytes built above.
        self._call = self._channel.unary_unary(self.method, response_deserializer=self.response_type().FromString)

    async def call(self, index: int = 0) -> tuple[np.ndarray, ServerReport | None]:
        response = await self._call(self._requests[index], timeout=self.spec.timeout_s, metadata=self._metadata or None)
        return self.response_outputs(response), None

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
