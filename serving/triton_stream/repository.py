"""The model repository of a streaming Triton: one Python-backend model in decoupled mode (`model.py` beside this
module) whose `config.pbtxt` is written with protobuf's text format, as Triton reads it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

MODEL_FILE = Path(__file__).parent / "python_backend" / "model.py"


@dataclass(frozen=True)
class StreamVariant:
    """What the rendered model runs: the model's folder (on the server's node), random weights or its own, and how
    requests are batched and where they compute."""

    model_folder: str
    random_weights: bool
    seed: int
    dtype: str  # auto | float32 | float16 | bfloat16
    gpu: bool  # instances on the GPU (KIND_GPU) or the CPU
    instances: int
    max_batch_size: int  # requests one generate runs together (1: each alone)
    batch_wait_us: int  # how long the first request of a batch waits for others


def model_config(name: str, variant: StreamVariant):  # -> model_config_pb2.ModelConfig
    """The model's config: decoupled (one response per token), inputs and outputs named as Triton's generate
    extension conventions have them, Triton's dynamic batcher forming each generate's batch."""
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name=name, backend="python", max_batch_size=variant.max_batch_size)
    config.model_transaction_policy.decoupled = True
    for input_name, data_type, optional in (("text_input", mc.TYPE_STRING, False), ("max_tokens", mc.TYPE_INT32, False),
                                            ("ignore_eos", mc.TYPE_BOOL, True),
                                            ("apply_chat_template", mc.TYPE_BOOL, True)):
        config.input.add(name=input_name, data_type=data_type, dims=[1], optional=optional)
    for output_name, data_type in (("text_output", mc.TYPE_STRING), ("num_input_tokens", mc.TYPE_UINT32),
                                   ("num_output_tokens", mc.TYPE_UINT32)):
        config.output.add(name=output_name, data_type=data_type, dims=[1])
    kind = mc.ModelInstanceGroup.KIND_GPU if variant.gpu else mc.ModelInstanceGroup.KIND_CPU
    config.instance_group.add(count=variant.instances, kind=kind)
    if variant.max_batch_size > 1:
        config.dynamic_batching.max_queue_delay_microseconds = variant.batch_wait_us
    parameters = {"model_folder": variant.model_folder, "random_weights": str(variant.random_weights).lower(),
                  "seed": str(variant.seed), "dtype": variant.dtype}
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def render(repository: Path, name: str, variant: StreamVariant) -> dict[str, str]:
    """Write the model's folder under `repository` (config.pbtxt, 1/model.py); the files as written, by name."""
    from google.protobuf import text_format

    folder = repository / name
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "1").mkdir(parents=True)
    config_text = text_format.MessageToString(model_config(name, variant))
    (folder / "config.pbtxt").write_text(config_text)
    shutil.copy(MODEL_FILE, folder / "1" / "model.py")
    return {"config.pbtxt": config_text, "model.py": MODEL_FILE.read_text()}
