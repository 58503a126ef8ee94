"""tierbench's TorchServe handler run directly, in this process, with a stand-in for what it uses of TorchServe's
context: every input format alone, and batches of mixed requests, against the model's own outputs; one forward pass
a batch, a bad request failing alone; the GPU a worker takes and the order its JPEG keys are read in. It needs no
TorchServe installed, so a handler bug shows here first, without the slow server of tests/test_torchserve_server.py."""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serving.clients.base import parse_server_timing, tensor_batch
from serving.torchserve import config as ts_config
from serving.torchserve.handler import TierbenchHandler
from serving.torchserve.payloads import BadRequest, jpeg_files
from serving.workloads.image import json_images
from serving.workloads.image.preprocessing import sample_jpegs
from tests.torchserve_helpers import ATOL, MODEL, expected_for, jpeg_reference, spec


class FakeMetrics:
    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()

    def add_counter(self, name: str, value: int, idx: Any = None, dimensions: Any = None) -> None:
        self.counters[name] += value


class FakeContext:
    """What the handler uses of TorchServe's `ts.context.Context`."""

    def __init__(self, model_dir: Path) -> None:
        self.system_properties = {"model_dir": str(model_dir), "gpu_id": None, "batch_size": 4}
        self.metrics = FakeMetrics()
        self.status: dict[int, tuple[int, str]] = {}
        self.headers: dict[int, dict[str, str]] = defaultdict(dict)

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self.status[idx] = (code, phrase)

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.headers[idx]["content-type"] = value

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self.headers[idx][key] = value


@pytest.fixture(scope="module")
def handler() -> Iterator[tuple[TierbenchHandler, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, reports = Path(tmp), Path(tmp) / "reports"
        reports.mkdir()
        variant = ts_config.TorchServeVariant(torch_threads=1, warmup_batch_sizes=(1, 2))
        config = ts_config.handler_config(MODEL, variant, str(reports))
        (model_dir / ts_config.HANDLER_CONFIG).write_text(json.dumps(config))
        instance = TierbenchHandler()
        instance.initialize(FakeContext(model_dir))
        yield instance, model_dir


def test_the_handler_warms_up_and_reports_its_device(handler) -> None:
    _, model_dir = handler
    (report,) = [json.loads(p.read_text()) for p in (model_dir / "reports").glob("worker-*.json")]
    assert report["device"] == "cpu" and report["dtype"] == "float32" and report["torch_threads"] == 1
    assert report["warmup_s"] > 0 and report["gpu_id"] is None


def test_each_format_alone_gives_the_models_outputs(handler) -> None:
    instance, model_dir = handler
    tensor = tensor_batch(spec("tensor", 3))
    jpegs = list(sample_jpegs()[:2])
    cases = [
        ({"body": bytearray(tensor.tobytes())}, expected_for(tensor), "application/octet-stream"),  # REST tensor
        ({"tensor": bytearray(tensor.tobytes())}, expected_for(tensor), "application/octet-stream"),  # gRPC tensor
        ({"image0": bytearray(jpegs[0]), "image1": bytearray(jpegs[1])}, jpeg_reference(jpegs),
         "application/octet-stream"),  # REST multipart / gRPC input keys
        ({"body": json.loads(json_images.encode_images(jpegs))}, jpeg_reference(jpegs), "application/json"),
    ]
    for request, expected, content_type in cases:
        context = FakeContext(model_dir)
        (answer,) = instance.handle([request], context)
        if content_type == "application/json":
            outputs = json_images.decode_outputs(answer)
        else:
            outputs = np.frombuffer(answer, np.float32).reshape(len(expected), 1000)
        np.testing.assert_allclose(outputs, expected, rtol=0, atol=ATOL)
        assert context.headers[0]["content-type"] == content_type and not context.status
        assert parse_server_timing(context.headers[0]["Server-Timing"]).executed_images == len(expected)


def test_one_forward_pass_serves_a_mixed_batch_and_a_bad_request_fails_alone(handler) -> None:
    instance, model_dir = handler
    tensor = tensor_batch(spec("tensor", 2))
    jpegs = list(sample_jpegs()[2:5])
    data = [{"body": bytearray(tensor.tobytes())},
            {"body": bytearray(b"\x00" * 12)},  # not a float32 image
            {"image0": bytearray(jpegs[0])},
            {"body": {"images": ["not base64!"]}},
            {"tensor": bytearray(tensor[:1].tobytes())},
            {"body": json.loads(json_images.encode_images(jpegs[1:]))}]
    context = FakeContext(model_dir)
    answers = instance.handle(data, context)
    assert len(answers) == len(data)
    assert {i: code for i, (code, _) in context.status.items()} == {1: 400, 3: 400}
    assert "not N float32 images" in json.loads(answers[1])["message"]
    assert "not base64" in json.loads(answers[3])["message"]
    np.testing.assert_allclose(np.frombuffer(answers[0], np.float32).reshape(2, 1000), expected_for(tensor), atol=ATOL)
    np.testing.assert_allclose(np.frombuffer(answers[2], np.float32).reshape(1, 1000), jpeg_reference(jpegs[:1]),
                               atol=ATOL)
    np.testing.assert_allclose(np.frombuffer(answers[4], np.float32).reshape(1, 1000), expected_for(tensor[:1]),
                               atol=ATOL)
    np.testing.assert_allclose(json_images.decode_outputs(answers[5]), jpeg_reference(jpegs[1:]), atol=ATOL)
    images = 2 + 1 + 1 + 2
    timings = {context.headers[i]["Server-Timing"] for i in (0, 2, 4, 5)}
    assert len(timings) == 1 and parse_server_timing(timings.pop()).executed_images == images  # one forward pass
    assert context.metrics.counters == {"ImagesServed": images, "ForwardPasses": 1, "RequestsServed": 4,
                                        "RequestsRejected": 2}


def test_a_batch_of_only_bad_requests_runs_nothing(handler) -> None:
    instance, model_dir = handler
    context = FakeContext(model_dir)
    answers = instance.handle([{"data": bytearray(b"x")}, {"image1": bytearray(b"x")}], context)
    assert [json.loads(a)["code"] for a in answers] == [400, 400]
    assert "expected a body" in json.loads(answers[0])["message"]
    assert context.metrics.counters == {"RequestsRejected": 2}


def test_a_worker_takes_the_gpu_torchserve_gave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from serving.torchserve.handler import worker_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert [worker_device("cuda", g) for g in (0, 1, None, -1)] == ["cuda:0", "cuda:1", "cuda", "cuda"]
    assert worker_device("cpu", 0) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker_device("cuda", 0) == "cpu"


def test_jpeg_keys_are_read_in_index_order() -> None:
    request = {f"image{i}": bytearray([i]) for i in (10, 2, 0, 1, 3, 4, 5, 6, 7, 8, 9)}
    assert [f[0] for f in jpeg_files(request)] == list(range(11))
    with pytest.raises(BadRequest, match="image0..image1"):
        jpeg_files({"image0": b"a", "image2": b"b"})

