"""What the TorchServe tests share (tests/test_torchserve*.py): the tiny model and its reference outputs, a node
without a GPU, a client spec of any input format, and the backend built on that node with chosen settings."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.config.compose import load_config
from serving.backend import BackendContext
from serving.clients.base import ClientSpec
from serving.models import preprocessing, reference_runner
from serving.node import NodeInfo
from serving.torchserve.backend import TorchServeBackend
from serving.torchserve.settings import TorchServeSettings
from serving.workloads.image.preprocessing import decode_and_preprocess

CFG = load_config(["model=tiny"])
TINY = CFG.model
MODEL = TINY.to_dict()
SHAPE = tuple(TINY.input_shape)
REFERENCE = reference_runner(TINY)
NODE = NodeInfo(hostname="localhost", ip="127.0.0.1", ray_node_id="", cpu_model="test", cpu_count=2)
ATOL = 1e-4


def spec(input_format: str, batch: int, url: str = "127.0.0.1:1/predictions/tiny") -> ClientSpec:
    return ClientSpec(target="", url=url, model_name="tiny", input_format=input_format, batch_size=batch,
                      input_shape=SHAPE, output_shape=(1000,))


def expected_for(images: np.ndarray) -> np.ndarray:
    return REFERENCE(np.ascontiguousarray(images))


def jpeg_reference(jpegs: list[bytes]) -> np.ndarray:
    return expected_for(decode_and_preprocess(jpegs, preprocessing(TINY)))


def backend_on(node: NodeInfo = NODE, **settings: Any) -> TorchServeBackend:
    context = BackendContext(name="torchserve", model=TINY, node=node, ray_options={}, warmup_batch_sizes=(1, 4))
    return TorchServeBackend(context, TorchServeSettings(**settings))
