"""Ray Serve deployment: an image classifier in PyTorch behind Serve's HTTP and gRPC ingresses, speaking the Open
Inference Protocol (KServe v2) as Triton does, so one request shape (and perf_analyzer) drives both servers.

OIP (serving/oip/protocol.py): under the app's route prefix, `GET /v2`, `/v2/health/live|ready`,
`/v2/models/<name>[/versions/1]`, `.../ready`, `.../config` (a Triton model config, what perf_analyzer reads) and
`POST .../infer` (JSON tensors, or Triton's binary tensor extension); errors are 400 (404: an unknown model or route)
with a JSON `{"error": ...}` body. Models: `<model>` (`input` FP32 [-1, C, H, W]) and `<model>_jpeg` (`jpeg` BYTES
[-1, 1], decoded and preprocessed in the replica with `serving.workloads.image.preprocessing`, the definition every JPEG
path shares), both returning `logits`, as Triton names them. gRPC: `inference.GRPCInferenceService` (tritonclient's
`service_pb2`; the proxy calls the method named like the RPC): ServerLive, ServerReady, ServerMetadata, ModelReady,
ModelMetadata, ModelConfig, ModelInfer. Serve's gRPC proxy routes a call to the application named in its `application`
metadata, or to the only application when exactly one is deployed on the cluster: clients that send none (perf_analyzer)
reach it only then.

Server-Timing (the replica's own time, its wait for its forward pass and the images of that pass,
`serving.pytorch.service.timing`): the HTTP
`Server-Timing` header; over gRPC the `server-timing` trailing metadata (a deployment method taking `grpc_context`
gets Serve's `RayServegRPCContext`, whose trailing metadata the proxy, or direct ingress, sets on the call).

The routes from before the OIP stay for their users: HTTP POST to the route prefix itself (JPEGs concatenated, their
lengths in `X-Image-Lengths`, or a raw float32 tensor; the float32 logits back; or base64 JPEGs in JSON, `jpeg_base64`)
and gRPC `tierbench.ImageClassifier/Classify` (serving/ray_serve/proto/classifier.proto).
Inference runs on one worker thread, like one Triton model instance; decoding runs beside it. With `batching`,
Serve's `@serve.batch` merges concurrent requests into one forward pass, counting images (not requests) against
`max_batch_size` as Triton's dynamic batcher does; with `batcher: when_free`, `serving.pytorch.when_free` does, taking
every request that queued while a pass ran (`@serve.batch` merges only those that arrive within its wait).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from serving.node import gpu_ids as node_gpu_ids
from serving.oip import protocol as oip
from serving.oip.protocol import OipError
from serving.pytorch.when_free import WhenFreeBatcher
from serving.ray_serve.clients import (
    JPEG_CONTENT_TYPE,
    LENGTHS_HEADER,
    TENSOR_CONTENT_TYPE,
    TIMING_HEADER,
    TIMING_METADATA,
)
from serving.ray_serve.proto.oip_service import service_pb2 as pb  # (and its requests picklable)
from serving.workloads.image import json_images

if TYPE_CHECKING:
    from serving.pytorch.service import Pass


def split_jpegs(body: bytes, lengths_header: str) -> list[bytes]:
    lengths = [int(n) for n in lengths_header.split(",") if n]
    if sum(lengths) != len(body):
        raise ValueError(f"{LENGTHS_HEADER} sums to {sum(lengths)} bytes but the body has {len(body)}")
    offsets = np.cumsum([0, *lengths])
    return [body[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def images_in(batches: list[np.ndarray]) -> int:
    """`@serve.batch`'s batch size: images, summed over the queued requests."""
    return sum(len(batch) for batch in batches)


def error_response(exc: OipError) -> Response:
    """An OIP error as Triton answers it: the status, and a JSON body `{"error": message}`."""
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


def subpath(scope: dict[str, Any]) -> str:
    """The request's path below the app's route prefix (Serve puts the prefix in `root_path`, and the whole path,
    prefix included, in `path`)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if path.startswith(root) else path


@serve.deployment
class TorchImageClassifier:
    """A replica: the model behind Serve's ingresses (`serving.pytorch.service.ImageService`: decoding, preprocessing,
    one inference thread), with `@serve.batch` (or `WhenFreeBatcher`, `batcher: when_free`) as its batcher when
    batching is on."""

    def __init__(self, model: dict[str, Any], device: str = "cpu", torch_threads: int | None = None,
                 options: dict[str, Any] | None = None, warmup_batch_sizes: tuple[int, ...] = (),
                 batching: dict[str, Any] | None = None) -> None:
        import ray

        from serving.pytorch.service import ImageService

        self.service = ImageService(model, device, torch_threads, options, tuple(warmup_batch_sizes),
                                    oip.SERVER_NAME, ray.__version__)
        self.input_shape = self.service.input_shape
        if batching:
            self.service.max_batch_size = int(batching["max_batch_size"])
            wait_s = float(batching["batch_wait_timeout_s"])
            if batching.get("batcher", "serve") == "when_free":
                self.service.batcher = WhenFreeBatcher(self.service.forward, self.service.max_batch_size, wait_s)
            else:
                self.service.batcher = serve.batch(max_batch_size=self.service.max_batch_size,
                                                   batch_wait_timeout_s=wait_s, batch_size_fn=images_in)(
                    self._infer_many)

    def info(self) -> dict[str, Any]:
        """How this replica runs (device, dtype, compile) and what its warm-up cost; where it runs."""
        import ray

        context = ray.get_runtime_context()
        gpu_ids = node_gpu_ids(context.get_accelerator_ids().get("GPU", []))
        return {**self.service.runner.info, "node_id": context.get_node_id(), "gpu_ids": gpu_ids, "pid": os.getpid()}

    def where(self) -> dict[str, str]:
        """The Ray node and host this replica runs on (recorded with every trial)."""
        from serving.node import current_location

        return current_location()

    async def _infer_many(self, batches: list[np.ndarray]) -> list[Pass]:
        """One forward pass for the requests `@serve.batch` queued together; each gets its rows back, with the
        number of images that pass ran (what Triton's statistics call an execution's batch) and when it started."""
        merged = batches[0] if len(batches) == 1 else np.concatenate(batches)
        ran = await self.service.forward(merged)
        return [ran._replace(logits=part) for part in np.split(ran.logits, np.cumsum([len(b) for b in batches])[:-1])]

    async def __call__(self, request: Request) -> Response:
        path = subpath(request.scope)
        if path.startswith("/v2"):
            status, body, headers = await self.service.oip.http(
                request.method, path, await request.body(), request.headers.get(oip.HEADER_LENGTH), self._oip_infer)
            return Response(body, status_code=status, headers=headers)
        if path not in ("", "/"):
            return error_response(OipError(f"no route {request.method} {path}: POST to the route prefix, or the "
                                           "Open Inference Protocol under /v2", 404))
        return await self._classify_http(request)

    async def _oip_infer(self, model: oip.ModelSignature, request: oip.InferRequest) -> tuple[np.ndarray, dict]:
        logits, timing = await self.service.oip_infer(model, request)
        return logits, {TIMING_HEADER: timing}

    async def _classify_http(self, request: Request) -> Response:
        """The route prefix itself: JPEGs (`X-Image-Lengths`) or a raw float32 tensor in, raw logits out; or base64
        JPEGs in JSON, JSON logits out (`serving.workloads.image.json_images`, the studies' JSON API)."""
        body = await request.body()
        content_type = request.headers.get("content-type", "")
        json_api = content_type.startswith(json_images.CONTENT_TYPE)
        try:
            if json_api:
                logits, timing = await self.service.images(json_images.decode_images(body))
            elif content_type.startswith(JPEG_CONTENT_TYPE):
                logits, timing = await self.service.images(split_jpegs(body, request.headers.get(LENGTHS_HEADER, "")))
            elif content_type.startswith(TENSOR_CONTENT_TYPE):
                logits, timing = await self.service.tensor(
                    np.frombuffer(body, dtype=np.float32).reshape(-1, *self.input_shape))
            else:
                return Response(f"unsupported Content-Type {content_type!r}: send {JPEG_CONTENT_TYPE} "
                                f"(with {LENGTHS_HEADER}), {TENSOR_CONTENT_TYPE} or {json_images.CONTENT_TYPE}",
                                status_code=415)
        except (OSError, ValueError) as exc:  # PIL: UnidentifiedImageError is an OSError
            return Response(f"bad request body: {exc}", status_code=400)
        if json_api:
            return Response(json_images.encode_outputs(logits), media_type=json_images.CONTENT_TYPE,
                            headers={TIMING_HEADER: timing})
        return Response(logits.tobytes(), media_type=TENSOR_CONTENT_TYPE, headers={TIMING_HEADER: timing})

    # gRPC: methods named like the RPCs, as Serve's proxy requires (hence N802). `grpc_context` (by that name) is
    # Serve's RayServegRPCContext; None when called through a deployment handle.

    async def ModelInfer(self, request: Any, grpc_context: Any = None) -> Any:  # noqa: N802
        try:
            model = self.service.oip.model(request.model_name, request.model_version)
            parsed = oip.parse_grpc(request)
            logits, timing = await self.service.oip_infer(model, parsed)
        except OipError as exc:
            return _refuse(grpc_context, exc, pb.ModelInferResponse())
        if grpc_context is not None:
            grpc_context.set_trailing_metadata([(TIMING_METADATA, timing)])
        return oip.grpc_response(model, logits, parsed)

    async def ModelMetadata(self, request: Any, grpc_context: Any = None) -> Any:  # noqa: N802
        try:
            return self.service.oip.model(request.name, request.version).metadata_pb()
        except OipError as exc:
            return _refuse(grpc_context, exc, pb.ModelMetadataResponse())

    async def ModelConfig(self, request: Any, grpc_context: Any = None) -> Any:  # noqa: N802
        try:
            return self.service.oip.model(request.name, request.version).config_pb()
        except OipError as exc:
            return _refuse(grpc_context, exc, pb.ModelConfigResponse())

    async def ModelReady(self, request: Any) -> Any:  # noqa: N802
        models = self.service.oip.models
        return pb.ModelReadyResponse(ready=request.name in models and request.version in ("", oip.VERSION))

    async def ServerLive(self, request: Any) -> Any:  # noqa: N802
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any) -> Any:  # noqa: N802
        return pb.ServerReadyResponse(ready=True)

    async def ServerMetadata(self, request: Any) -> Any:  # noqa: N802
        service = self.service.oip
        return pb.ServerMetadataResponse(**oip.server_metadata(service.server_version, service.server_name))

    async def Classify(self, request: Any) -> Any:  # noqa: N802 - the gRPC route from before the OIP
        from serving.ray_serve.proto import classifier_pb2

        if request.jpegs:
            logits, timing = await self.service.images(list(request.jpegs))
        else:
            shape = tuple(request.shape) or (-1, *self.input_shape)
            logits, timing = await self.service.tensor(np.frombuffer(request.tensor, dtype=np.float32).reshape(shape))
        return classifier_pb2.ClassifyResponse(logits=logits.tobytes(), shape=list(logits.shape),
                                               server_timing=timing)


def _refuse(grpc_context: Any, exc: OipError, empty: Any) -> Any:
    """An OIP error over gRPC: INVALID_ARGUMENT (NOT_FOUND for an unknown model) with the message, set on the call's
    context (the proxy sends the status instead of the empty reply); raised where there is no context."""
    import grpc

    if grpc_context is None:
        raise exc
    grpc_context.set_code(grpc.StatusCode.NOT_FOUND if exc.status == 404 else grpc.StatusCode.INVALID_ARGUMENT)
    grpc_context.set_details(str(exc))
    return empty


APP_BUILDER = "serving.ray_serve.deployment:app_builder"


def app_builder(args: dict[str, Any]) -> Any:
    """The application a Serve config's `import_path` names (`APP_BUILDER`): the classifier built with `args` (the
    constructor's arguments, as `RayServeTorchBackend.deploy_files` writes them); the config's `deployments` entry
    sets replicas and resources."""
    return TorchImageClassifier.bind(**args)
