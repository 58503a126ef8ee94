"""PyTorch behind TorchServe (`torchserve`): tierbench's handler (serving/torchserve/handler.py) in TorchServe's Python
workers, the model run as in every PyTorch server here (`serving.pytorch.runner`), behind TorchServe's own REST and
gRPC inference APIs, from a `TorchServeHost` actor on the tier's node.

Clients speak TorchServe's native APIs (serving/torchserve/clients.py): REST `POST /predictions/<model>` (a float32
body, multipart JPEGs, or base64 JPEGs in JSON) and gRPC `InferenceAPIsService/Predictions`. TorchServe's batcher
merges up to `batch_size` REQUESTS (not images) per handler call, which runs one forward pass for all their images.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import asdict
from typing import Any

from serving.backend import BackendContext, ServerHandle
from serving.clients.base import ClientSpec
from serving.host_actor import host_counters, place_host, stop_host
from serving.pytorch.backend import TorchBackend
from serving.torchserve import config as ts_config
from serving.torchserve.facts import TorchServeFacts
from serving.torchserve.settings import TorchServeSettings
from serving.torchserve_metrics import HANDLER_COUNTERS, breakdown, served_images
from serving.workloads.image.formats import InputFormat

log = logging.getLogger(__name__)

CLIENTS = {"http": "serving.torchserve.clients.TorchServeRestClient",
           "grpc": "serving.torchserve.clients.TorchServeGrpcClient"}
JSON_CLIENT = "serving.workloads.image.json_images.JsonImagesClient"  # jpeg_base64, to /predictions/<model>
HOST_CALL_MARGIN_S = 60.0  # beyond the server's own start timeout: archiving, and the actor's own start


class TorchServeBackend(TorchBackend):
    settings: TorchServeSettings
    computes = "TorchServe's workers"
    ingress = "TorchServe"

    def __init__(self, context: BackendContext, settings: TorchServeSettings) -> None:
        super().__init__(context, settings)
        self._actor: Any = None  # the TorchServeHost while the server runs

    def variant(self) -> ts_config.TorchServeVariant:
        """What the host actor renders and serves."""
        s = self.settings
        return ts_config.TorchServeVariant(
            workers=s.workers, batch_size=s.batch_size, max_batch_delay_ms=s.max_batch_delay_ms,
            job_queue_size=s.job_queue_size, response_timeout_s=s.response_timeout_s, device=self.device,
            torch_threads=s.torch_threads, options=asdict(self.options),
            warmup_batch_sizes=tuple(int(b) for b in self.context.warmup_batch_sizes))

    @property
    def actor_gpus(self) -> float:
        """TorchServe and its workers, which the host actor starts, share its GPU."""
        return self.settings.num_gpus

    def runs_on(self) -> str:
        facts = self.context.node.facts(TorchServeFacts)
        server = f"TorchServe {facts.version}" if facts.version else "TorchServe"
        return f"{server}, {self.torch_runs_on()}"

    def unsupported_reason(self, protocol: str, input_format: str) -> str | None:
        node = self.context.node
        reason = self.transport_reason(protocol, input_format, CLIENTS)
        if reason:
            return reason
        if input_format == InputFormat.JPEG_BASE64 and protocol == "grpc":
            return ("TorchServe's gRPC PredictionsRequest carries map<string, bytes>: base64 in JSON is a REST "
                    "workaround (the TorchServe post has no such cell either)")
        reason = self.model_reason()
        if reason:
            return reason
        problem = node.facts(TorchServeFacts).problem
        if problem:
            return f"TorchServe cannot start on node {node.hostname}: {problem}"
        return self.torch_reason()

    def start(self) -> ServerHandle:
        import ray

        from serving.torchserve.host import TorchServeHost

        ctx = self.context
        self._actor = place_host(TorchServeHost, self.actor_options(), (ctx.model.to_dict(),
                                                                        self.variant(), ctx.host), ctx, "TorchServe")
        try:
            info: dict[str, Any] = ray.get(self._actor.start.remote(self.start_timeout_s),
                                           timeout=self.start_timeout_s + HOST_CALL_MARGIN_S)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"{ctx.name}: TorchServe did not report ready within {self.start_timeout_s:g} s "
                               f"(raise backends.{ctx.name}.start_timeout_s for a slow warm-up)") from exc
        return self._handle(info)

    def _handle(self, info: dict[str, Any]) -> ServerHandle:
        """The running server as the sweep sees it, from what its host returned."""
        ctx, ports = self.context, info["ports"]
        host = ctx.client_host
        workers = info["workers"]
        log.info("%s: TorchServe %s serving %s on %s (%d workers)", ctx.name, info["server_version"],
                 ctx.model.name, info["device"], len(workers))
        return ServerHandle(
            server_mode="torchserve",
            urls={"http": f"http://{host}:{ports['inference']}", "grpc": f"{host}:{ports['grpc_inference']}",
                  "management": f"http://{host}:{ports['management']}",
                  "metrics": f"http://{host}:{ports['metrics']}/metrics"},
            params=self._params(info),
            startup_s=info["startup_s"],
            metrics=self._start_metrics(info),
            artifacts=info["configs"],
            node_id=info.get("node_id"),
            gpu_ids=tuple(info.get("gpu_ids") or ()),
            # Every worker's own torch device, as its handler reported it after warm-up.
            on_gpu=bool(workers) and all(str(w["device"]).startswith("cuda") for w in workers),
            processes=(info["launcher_pid"],) if info.get("launcher_pid") else (),
        )

    def _params(self, info: dict[str, Any]) -> dict[str, Any]:
        """Trial params: device, precision, compile, the workers and batcher, where it runs."""
        workers = info["workers"]
        first = workers[0] if workers else {}
        params: dict[str, Any] = {
            "device": info["device"], "torchserve_workers": self.settings.workers,
            "torch_dtype": first.get("dtype", ""), "torch_compile": bool(first.get("torch_compile")),
            "torch_threads": first.get("torch_threads", ""),
            "torchserve_version": info["server_version"], "server_node_id": info.get("node_id") or "",
            "server_hostname": info["hostname"], **self.batching_params(),
            "server_warmup_batch_sizes": ",".join(str(b) for b in self.context.warmup_batch_sizes),
            **self.torch_params(first.get("model_file"), info.get("gpu_ids"))}
        if "num_gpus" in self.actor_options():
            params["server_num_gpus"] = self.settings.num_gpus
        return params

    def _start_metrics(self, info: dict[str, Any]) -> dict[str, float]:
        """What the start cost: archiving, the server to every worker READY (warm-up included), each worker's warm-up
        and compile (the slowest worker's)."""
        metrics = {"server_ready_s": float(info["ready_s"]), "server_archive_s": float(info["archive_s"])}
        for key, name in (("warmup_s", "server_warmup_s"), ("warmup_first_call_s", "server_warmup_first_call_s"),
                          ("torch_compile_s", "torch_compile_s")):
            values = [float(w[key]) for w in info["workers"] if key in w]
            if values:
                metrics[name] = max(values)
        return metrics

    def batching_params(self) -> dict[str, Any]:
        """Server-side batching in the terms every server shares (see TritonBackend.batching_params); TorchServe's
        max batch counts requests, each of any number of images."""
        s, on = self.settings, self.settings.batch_size > 1
        return {"server_batching": on, "server_instances": s.workers,
                "server_max_batch_size": s.batch_size if on else 0,
                "server_batch_wait_ms": float(s.max_batch_delay_ms) if on else 0.0,
                "server_preferred_batch_sizes": "", "server_max_queue_size": s.job_queue_size}

    def stop(self) -> dict[str, str]:
        actor, self._actor = self._actor, None
        return stop_host(actor, self.context, "TorchServe")

    def server_counters(self, handle: ServerHandle) -> dict[str, float] | None:
        return host_counters(self._actor)

    def server_breakdown(self, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """Per request: the frontend's time from arrival to answer and queued (REST trials only: TorchServe adds
        gRPC requests to neither sum), and the mean images per forward pass."""
        return breakdown(before, after)

    def served_images(self, before: dict[str, float], after: dict[str, float]) -> float | None:
        return served_images(before, after)

    def client_spec(self, handle: ServerHandle, protocol: str, input_format: str, batch_size: int) -> ClientSpec:
        """REST clients post to `/predictions/<model>` (jpeg_base64 through the shared JSON client); gRPC clients
        call the inference port."""
        name = self.context.model.name
        if protocol == "http":
            target = JSON_CLIENT if input_format == InputFormat.JPEG_BASE64 else CLIENTS["http"]
            return self._spec(target, f"{handle.urls['http']}/predictions/{name}", name, input_format, batch_size)
        return self._spec(CLIENTS[protocol], handle.urls[protocol], name, input_format, batch_size)

    def deploy_files(self, rendered: dict[str, str]) -> dict[str, str]:
        """TorchServe serving these settings outside tierbench, from one folder: `run.sh` (the archiver and
        torchserve commands), the handler and its JSON, config.properties on TorchServe's default ports, the
        metrics and log configs. The handler imports `serving.*`: tierbench must be installed where it runs."""
        model = self.context.model.to_dict()
        name, variant, store = str(model["name"]), self.variant(), "model_store"
        # The measured server's own (saved with its files), else rendered here (that needs torchserve installed).
        metrics_yaml = rendered.get("metrics.yaml") or ts_config.metrics_yaml(HANDLER_COUNTERS)
        archiver = ["torch-model-archiver", *ts_config.archiver_args(name, ts_config.HANDLER_FILE,
                                                                     [ts_config.HANDLER_CONFIG], store)]
        server = ["torchserve", *ts_config.torchserve_args(name, store, "config.properties", "log4j2.xml")]
        weights = f" It reads {model.get('weights') or model.get('path')} (the measured node's copy)." \
            if model.get("weights") or model.get("path") else ""
        run = (f"#!/usr/bin/env bash\n# TorchServe serving {name} with the settings of backend entry "
               f"{self.context.name} (device {variant.device}).\n# Needs Java and, in this Python environment, "
               f"torchserve, torch-model-archiver and tierbench (the handler imports serving.*).{weights}\n"
               f"set -euo pipefail\ncd \"$(dirname \"$0\")\"\nmkdir -p {store}\n"
               f"{shlex.join(archiver)}\nexec {shlex.join(server)}\n")
        return {
            "run.sh": run,
            ts_config.HANDLER_FILE: ts_config.HANDLER_SOURCE.read_text(),
            ts_config.HANDLER_CONFIG: json.dumps(ts_config.handler_config(model, variant, None), indent=2),
            "config.properties": ts_config.properties(name, model, variant, self.context.host, ts_config.Ports(),
                                                      store, "metrics.yaml"),
            "metrics.yaml": metrics_yaml,
            "log4j2.xml": ts_config.LOG4J2,
        }

