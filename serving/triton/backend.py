"""Triton serving the model as ONNX: ONNX Runtime with the CUDA EP (`triton_onnx`) or the TensorRT EP
(`triton_trt`), over HTTP and gRPC, from a `TritonServerHost` actor on the tier's node."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from serving.backend import Backend, BackendContext, ServerHandle
from serving.clients.base import ClientSpec

log = logging.getLogger(__name__)

CLIENTS = {
    "http": "serving.clients.triton_http.TritonHttpClient",
    "grpc": "serving.clients.triton_grpc.TritonGrpcClient",
}
PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                  "tensorrt": "TensorrtExecutionProvider"}


class TritonBackend(Backend):
    def __init__(self, context: BackendContext, accelerator: str = "cuda", instance_count: int = 1,
                 ort_threads: int | None = None, fp16: bool = False) -> None:
        super().__init__(context)
        self.requested_accelerator = accelerator
        self.instance_count = instance_count
        self.ort_threads = ort_threads
        self.fp16 = fp16
        self._actor = None

    @property
    def accelerator(self) -> str:
        """What actually runs: the CUDA EP falls back to ONNX Runtime's CPU EP on a node without a GPU."""
        if self.requested_accelerator == "cuda" and not self.context.node.has_gpu:
            return "cpu"
        return self.requested_accelerator

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        if protocol not in CLIENTS:
            return f"Triton has no {protocol!r} client here (supported: {sorted(CLIENTS)})"
        if self.accelerator == "tensorrt" and not node.has_gpu:
            return (f"the TensorRT execution provider needs an NVIDIA GPU; node {node.hostname} has none "
                    f"({node.gpu_name})")
        provider = PROVIDER_NAMES[self.accelerator]
        if self.accelerator != "cpu" and not node.native_triton and provider not in node.ort_providers:
            return (f"onnxruntime on node {node.hostname} lacks {provider} (has {list(node.ort_providers)}): "
                    "install tierbench[gpu] there, or run NVIDIA's Triton container")
        if input_format != "tensor":
            return ("Triton receives float32 tensors only: server-side JPEG decoding (a preprocessing "
                    "ensemble) is not built yet")
        return None

    def start(self) -> ServerHandle:
        import ray

        from serving.triton.host import TritonServerHost

        ctx = self.context
        config_text = (Path(ctx.model_repository) / ctx.model.name / "config.pbtxt").read_text()
        variant = {"accelerator": self.accelerator, "instance_count": self.instance_count,
                   "ort_threads": self.ort_threads, "fp16": self.fp16}
        actor_cls = ray.remote(TritonServerHost).options(num_cpus=0.01, **ctx.ray_options)
        self._actor = actor_cls.remote(OmegaConf.to_container(ctx.model, resolve=True), config_text, variant,
                                       ctx.triton_server, ctx.host, str(Path(ctx.model_repository).resolve()))
        try:  # placed at all? (a node whose resources are taken leaves the actor pending, silently)
            ray.get(self._actor.where.remote(), timeout=ctx.start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"{ctx.name}: the Triton host actor is still pending after {ctx.start_timeout_s:g} s; "
                               f"it asks for 0.01 CPU and {ctx.ray_options}: are the node's resources taken?") from exc
        info: dict[str, Any] = ray.get(self._actor.start.remote(ctx.start_timeout_s),
                                       timeout=ctx.start_timeout_s + 600)  # + an ONNX export on first use
        endpoints = info["endpoints"]
        host = ctx.client_host
        log.info("%s: %s serving %s (%s)", ctx.name, info["server_mode"], ctx.model.name, self.accelerator)
        return ServerHandle(
            server_mode=info["server_mode"],
            urls={"http": f"{host}:{endpoints['http_port']}", "grpc": f"{host}:{endpoints['grpc_port']}",
                  "metrics": f"http://{host}:{endpoints['metrics_port']}/metrics"},
            params={"execution_provider": PROVIDER_NAMES[self.accelerator], "instance_count": self.instance_count,
                    "onnx_max_abs_diff": info["export"]["max_abs_diff"], "server_node_id": info["node_id"],
                    "server_hostname": info["hostname"]},
            startup_s=info["startup_s"],
            artifacts={"config.pbtxt": info["config_pbtxt"]},
        )

    def stop(self) -> dict[str, str]:
        import ray

        if self._actor is None:
            return {}
        actor, self._actor = self._actor, None
        try:
            return ray.get(actor.stop.remote(self.context.stop_timeout_s), timeout=self.context.stop_timeout_s + 30)
        except Exception as exc:  # noqa: BLE001 - the actor may be dead; its server dies with it
            log.warning("%s: stopping the Triton host failed (%s); killing the actor", self.context.name, exc)
            return {}
        finally:
            ray.kill(actor)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        return self._spec(CLIENTS[protocol], handle.urls[protocol], self.context.model.name, input_format, batch_size)
