"""The plain FastAPI + PyTorch service (`fastapi`), the 5-way study's baseline: uvicorn started by a `FastApiHost`
actor on the tier's node, reached over HTTP only: `jpeg_base64` at `POST /predict` (the study's JSON API), `tensor`
and `jpeg` through the Open Inference Protocol (`serving.oip.clients`, as Triton and Ray Serve are reached), so the
compiled load engine drives every format. It keeps no metrics endpoint; each response's `Server-Timing` says the
service's own time."""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import asdict, replace
from typing import Any

from serving.backend import BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.fastapi.facts import FastApiFacts
from serving.fastapi.settings import FastApiSettings
from serving.host_actor import place_host, stop_host
from serving.oip.protocol import model_signatures
from serving.pytorch.backend import TorchBackend
from serving.workloads.image.formats import InputFormat

log = logging.getLogger(__name__)

OIP_CLIENT = "serving.oip.clients.OipHttpClient"
JSON_CLIENT = "serving.workloads.image.json_images.JsonImagesClient"
PREDICT_ROUTE = "/predict"


class FastApiBackend(TorchBackend):
    settings: FastApiSettings
    computes = "the FastAPI service"
    ingress = "a FastAPI service"

    def __init__(self, context: BackendContext, settings: FastApiSettings) -> None:
        super().__init__(context, settings)
        self._actor: Any = None

    @property
    def actor_gpus(self) -> float:
        """uvicorn's processes, which the host actor starts, share its GPU."""
        return self.settings.num_gpus

    def runs_on(self) -> str:
        facts = self.context.node.facts(FastApiFacts)
        return f"FastAPI {facts.fastapi} on uvicorn {facts.uvicorn}, {self.torch_runs_on()}"

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        problem = node.facts(FastApiFacts).problem
        if problem:
            return f"the FastAPI service cannot run on node {node.hostname}: {problem}"
        if protocol == "grpc":
            return "a plain FastAPI service speaks HTTP only (its gRPC counterpart would be another server)"
        return self.transport_reason(protocol, input_format, ("http",)) or self.model_reason() or self.torch_reason()

    def service_config(self) -> dict[str, Any]:
        """The service's config file (`serving.fastapi.app`): what the host starts and the deploy files export."""
        return {"model": self.context.model.to_dict(), "device": self.device,
                "torch_threads": self.settings.torch_threads,
                "options": asdict(self.options),
                "warmup_batch_sizes": [int(b) for b in self.context.warmup_batch_sizes]}

    def start(self) -> ServerHandle:
        import ray

        from serving.fastapi.host import FastApiHost

        ctx = self.context
        self._actor = place_host(FastApiHost, self.actor_options(), (self.service_config(), ctx.host,
                                                                     self.settings.workers), ctx, "FastAPI")
        info = ray.get(self._actor.start.remote(self.start_timeout_s), timeout=self.start_timeout_s + 60)
        runner = info["runner"]
        log.info("%s: FastAPI service on port %d (%d workers, %s)", ctx.name, info["port"], self.settings.workers,
                 runner["device"])
        params = {"device": runner["device"], "torch_dtype": runner["dtype"], "torch_compile": runner["torch_compile"],
                  "fastapi_workers": self.settings.workers, "server_node_id": info["node_id"],
                  "server_hostname": info["hostname"], **self.batching_params(),
                  "server_warmup_batch_sizes": ",".join(str(b) for b in ctx.warmup_batch_sizes)}
        if info["gpu_ids"]:
            params["server_gpu_ids"] = ",".join(str(i) for i in info["gpu_ids"])
        metrics = {f"server_{k}": float(runner[k]) for k in ("warmup_s", "warmup_first_call_s") if k in runner}
        return ServerHandle(server_mode="fastapi", urls={"http": f"http://{ctx.client_host}:{info['port']}"},
                            params=params, startup_s=info["startup_s"], metrics=metrics, node_id=info["node_id"],
                            gpu_ids=tuple(info["gpu_ids"]), on_gpu=str(runner["device"]).startswith("cuda"),
                            processes=(info["pid"],))

    def stop(self) -> dict[str, str]:
        actor, self._actor = self._actor, None
        return stop_host(actor, self.context, "FastAPI")

    def batching_params(self) -> dict[str, Any]:
        """Server-side batching in the terms every server shares (see TritonBackend.batching_params): none here."""
        return {"server_batching": False, "server_instances": self.settings.workers, "server_max_batch_size": 0,
                "server_batch_wait_ms": 0.0, "server_preferred_batch_sizes": "", "server_max_queue_size": 0}

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        """`jpeg_base64`: the JSON API at /predict; `tensor` / `jpeg`: the OIP models `<model>` / `<model>_jpeg`."""
        url = handle.urls["http"]
        if input_format == InputFormat.JPEG_BASE64:
            return self._spec(JSON_CLIENT, url + PREDICT_ROUTE, self.context.model.name, input_format, batch_size)
        model = model_signatures(self.context.model)[input_format]
        spec = self._spec(OIP_CLIENT, url, model.name, input_format, batch_size)
        return replace(spec, input_name=model.input_name, output_name=model.output_name)

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """The service's config file and the command that serves it with these settings (tierbench installed)."""
        from serving.fastapi.app import CONFIG_VARIABLE
        from serving.fastapi.host import uvicorn_command

        command = ["uvicorn", *uvicorn_command("0.0.0.0", 8000, self.settings.workers)[3:]]
        run = (f"#!/bin/sh\n# The FastAPI service with the settings of backend entry {self.context.name}; POST "
               f"/predict (base64 JPEGs in JSON) or the Open Inference Protocol under /v2.\n"
               f'{CONFIG_VARIABLE}="$(dirname "$0")/serving_config.json" exec {shlex.join(command)}\n')
        return {"serving_config.json": json.dumps(self.service_config(), indent=2) + "\n", "run.sh": run}
