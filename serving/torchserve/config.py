"""What TorchServe is started with, rendered from one `TorchServeVariant`: the handler's JSON shipped in the .mar,
`config.properties` (addresses, sizes, the model's workers and batcher), the metrics YAML declaring the handler's
counters, a quiet log4j2 config, and the torch-model-archiver and torchserve command lines. The host actor writes
them into its work dir; `TorchServeBackend.deploy_files` writes the same for a deployment outside tierbench."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.process import free_ports

MODEL_VERSION = "1.0"
HANDLER_CONFIG = "tierbench.json"  # the handler's config, an extra file of the .mar (in the worker's model_dir)
HANDLER_FILE = "tierbench_handler.py"  # the handler's name in the .mar: a module name no other package takes
HANDLER_SOURCE = Path(__file__).with_name("handler.py")
TS_DEFAULT_MAX_MESSAGE = 6_553_500  # TorchServe's default max_request_size / max_response_size (bytes)
JSON_BYTES_PER_FLOAT = 24  # a float32 as JSON text, at most ("-1.2345678901234567e-05, ")
# `torchserve` (its launcher, `ts.model_server.start`) run by our own interpreter, from the work dir: TorchServe
# starts its model workers with the launcher's `sys.executable` (its `--python`), so they import this very tierbench
# and torch. A SIGTERM to the launcher alone (its parent-death signal: the host actor died) would orphan the Java
# frontend and its workers, which go on serving: the launcher passes it on to its whole process group and waits.
LAUNCHER = """import os, signal, sys
def stop_group(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
signal.signal(signal.SIGTERM, stop_group)
os.chdir(sys.argv.pop(1))
from ts.model_server import start
sys.exit(start())
"""


@dataclass(frozen=True)
class Ports:
    """TorchServe's five listeners (its defaults: 8080 8081 8082 7070 7071)."""

    inference: int = 8080
    management: int = 8081
    metrics: int = 8082
    grpc_inference: int = 7070
    grpc_management: int = 7071

    @classmethod
    def free(cls, host: str) -> Ports:
        return cls(*free_ports(5, host))


@dataclass(frozen=True)
class TorchServeVariant:
    """What one TorchServe serves: its workers and batcher, and how the handler runs the model."""

    workers: int = 1
    batch_size: int = 1  # requests per handler call (TorchServe's batchSize)
    max_batch_delay_ms: int = 5
    job_queue_size: int = 100
    response_timeout_s: int = 120
    device: str = "cpu"  # cuda | cpu: what the handler asks for (cuda:<gpu_id> TorchServe gives the worker)
    torch_threads: int | None = None  # null: the node's cores
    options: dict[str, Any] = field(default_factory=dict)  # serving.pytorch.runner.TorchOptions
    warmup_batch_sizes: tuple[int, ...] = ()


def handler_config(model: dict[str, Any], variant: TorchServeVariant, report_dir: str | None) -> dict[str, Any]:
    """The handler's JSON: the model config, how to run it, and where each worker reports its device and warm-up."""
    return {"model": model, "device": variant.device, "torch_threads": variant.torch_threads,
            "options": dict(variant.options), "warmup_batch_sizes": [int(b) for b in variant.warmup_batch_sizes],
            "report_dir": report_dir}


def message_limits(model: dict[str, Any]) -> tuple[int, int]:
    """max_request_size and max_response_size: room for a request of model.max_batch_size float32 images (twice over:
    JPEGs of odd sizes, base64) and for its outputs as JSON; never below TorchServe's defaults. The limit applies to
    REST bodies and to gRPC messages alike."""
    images = int(model["max_batch_size"])
    image_floats = 1
    for dim in model["input_shape"]:
        image_floats *= int(dim)
    output_floats = 1
    for dim in model.get("output_shape") or [model["num_classes"]]:
        output_floats *= int(dim)
    request = max(TS_DEFAULT_MAX_MESSAGE, 2 * images * image_floats * 4)
    response = max(TS_DEFAULT_MAX_MESSAGE, images * output_floats * JSON_BYTES_PER_FLOAT)
    return request, response


def models_entry(name: str, variant: TorchServeVariant) -> dict[str, Any]:
    """`models=`: the model's workers and batcher (TorchServe applies it to the model named by `--models`)."""
    return {name: {MODEL_VERSION: {"defaultVersion": True, "marName": f"{name}.mar",
                                   "minWorkers": variant.workers, "maxWorkers": variant.workers,
                                   "batchSize": variant.batch_size, "maxBatchDelay": variant.max_batch_delay_ms,
                                   "responseTimeout": variant.response_timeout_s}}}


def properties(name: str, model: dict[str, Any], variant: TorchServeVariant, host: str, ports: Ports,
               store: str, metrics_config: str) -> str:
    """config.properties; every listener on `host`."""
    request, response = message_limits(model)
    url_host = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
    values = {
        "inference_address": f"http://{url_host}:{ports.inference}",
        "management_address": f"http://{url_host}:{ports.management}",
        "metrics_address": f"http://{url_host}:{ports.metrics}",
        "grpc_inference_address": host,
        "grpc_management_address": host,
        "grpc_inference_port": ports.grpc_inference,
        "grpc_management_port": ports.grpc_management,
        "disable_token_authorization": "true",  # TorchServe >= 0.11 asks for a token otherwise
        "enable_model_api": "false",
        "install_py_dep_per_model": "false",  # workers run this interpreter, never a per-model venv
        "number_of_gpu": 1 if variant.device == "cuda" else 0,  # the GPU Ray gave (CUDA_VISIBLE_DEVICES), or none
        "job_queue_size": variant.job_queue_size,
        "max_request_size": request,
        "max_response_size": response,
        "metrics_mode": "prometheus",
        "metrics_config": metrics_config,
        "disable_system_metrics": "true",  # else a collector process starts every minute
        "model_store": store,
        "workflow_store": store,
        "default_workers_per_model": variant.workers,
        "models": json.dumps(models_entry(name, variant)),
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def metrics_yaml(counters: tuple[str, ...]) -> str:
    """TorchServe's own metrics config with the handler's counters declared: undeclared model metrics never reach
    the metrics endpoint."""
    import yaml
    from ts import __file__ as ts_init

    config = yaml.safe_load((Path(ts_init).parent / "configs" / "metrics.yaml").read_text())
    model_metrics = config.setdefault("model_metrics", {})
    declared = model_metrics.setdefault("counter", []) or []
    known = {metric["name"] for metric in declared}
    declared += [{"name": name, "unit": "Count", "dimensions": ["ModelName", "Level"]}
                 for name in counters if name not in known]
    model_metrics["counter"] = declared
    return yaml.safe_dump(config, sort_keys=False)


# The frontend's warnings and errors, its start-up banner, and what the workers print (tracebacks included) but their
# line per request; the access log keeps one line per request. TorchServe's own config logs every request several
# times over, which costs the frontend CPU under load.
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <Appenders>
    <File name="access_log" fileName="${env:LOG_LOCATION:-logs}/access_log.log">
      <PatternLayout pattern="%d{ISO8601} - %m%n"/></File>
    <File name="ts_log" fileName="${env:LOG_LOCATION:-logs}/ts_log.log">
      <PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
    <File name="model_log" fileName="${env:LOG_LOCATION:-logs}/model_log.log">
      <PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
    <Console name="STDOUT" target="SYSTEM_OUT"><PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></Console>
  </Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="info" additivity="false"><AppenderRef ref="access_log"/></Logger>
    <Logger name="io.netty" level="error"/>
    <Logger name="org.apache" level="off"/>
    <Logger name="MODEL_LOG" level="info" additivity="false">
      <RegexFilter regex=".*Backend received inference at.*" onMatch="DENY" onMismatch="ACCEPT"/>
      <AppenderRef ref="model_log"/></Logger>
    <Logger name="MODEL_METRICS" level="off" additivity="false"/>
    <Logger name="TS_METRICS" level="off" additivity="false"/>
    <Logger name="org.pytorch.serve.ModelServer" level="info" additivity="false">
      <AppenderRef ref="ts_log"/><AppenderRef ref="STDOUT"/></Logger>
    <Logger name="org.pytorch.serve" level="warn" additivity="false"><AppenderRef ref="ts_log"/></Logger>
    <Root level="warn"><AppenderRef ref="ts_log"/></Root>
  </Loggers>
</Configuration>
"""


def archiver_args(name: str, handler: str, extra_files: list[str], export_path: str) -> list[str]:
    """torch-model-archiver's arguments: the handler and its JSON; no serialized file (the handler builds the model
    from its config, reading any weights file the config names)."""
    return ["--model-name", name, "--version", MODEL_VERSION, "--handler", handler,
            "--extra-files", ",".join(extra_files), "--export-path", export_path, "--force"]


def torchserve_args(name: str, store: str, config: str, log_config: str) -> list[str]:
    """`torchserve`'s arguments: in the foreground (its process group is the server), no config snapshots."""
    return ["--start", "--foreground", "--ncs", "--model-store", store, "--models", f"{name}={name}.mar",
            "--ts-config", config, "--log-config", log_config]


def archiver_command(args: list[str]) -> list[str]:
    """torch-model-archiver of this interpreter's environment (its console script's module)."""
    return [sys.executable, "-m", "model_archiver.model_packaging", *args]


def launcher_command(work_dir: str, args: list[str]) -> list[str]:
    """`torchserve` (its launcher, `ts.model_server.start`) run by this interpreter from `work_dir`."""
    return [sys.executable, "-c", LAUNCHER, work_dir, *args]
