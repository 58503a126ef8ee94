"""A running Triton takes another candidate's settings by reloading one model (explicit model control), the way a
settings search moves from candidate to candidate: the bundled server, no Ray. The new config is the one served,
the JPEG ensemble keeps answering the same logits, a config that cannot load is refused with Triton's reason while
the old one goes on serving, and nothing outlives the stop. A `max_batch_size` setting (not reloadable: a new
process) bounds the classifier and the ensemble alike."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
import tritonclient.http as triton_http

from experiments.config.compose import load_config
from serving.paths import REPO_ROOT
from serving.triton.ensemble import JPEG_INPUT, ensemble_model_name
from serving.triton.repository import TritonVariant
from serving.workloads.image.preprocessing import sample_jpegs
from tests.processes import owned_environment

pytestmark = pytest.mark.slow

START = TritonVariant("cpu", instance_count=1, warmup_batch_sizes=(1,))


def jpeg_logits(client: triton_http.InferenceServerClient, model: str) -> np.ndarray:
    request = triton_http.InferInput(JPEG_INPUT, [1, 1], "BYTES")
    request.set_data_from_numpy(np.array([[sample_jpegs(1)[0]]], dtype=object))
    result = client.infer(ensemble_model_name(model), [request])
    return result.as_numpy(result.get_response()["outputs"][0]["name"])


def test_a_reload_serves_the_new_config_and_a_bad_one_leaves_the_old_serving() -> None:
    from serving.triton.host import TritonServerHost

    model = load_config(["model=tiny"]).model
    name = model.name
    with owned_environment():  # every stub, of each config loaded, ends with the stop
        host = TritonServerHost(model, START, "bundled", "127.0.0.1", str(REPO_ROOT / "model_repository"),
                                preprocess_instances=1)
        try:
            started = host.start(180)
            client = triton_http.InferenceServerClient(f"127.0.0.1:{started['endpoints']['http_port']}")
            before = jpeg_logits(client, name)
            assert not started["reloaded"]

            asked = time.monotonic()
            reloaded = host.reload(replace(START, instance_count=2, dynamic_batching=True, max_queue_delay_us=1500),
                                   120)
            assert reloaded["reloaded"] and reloaded["ready_s"] <= time.monotonic() - asked
            assert reloaded["endpoints"] == started["endpoints"], "the same process and ports"
            served = client.get_model_config(name)
            assert [g["count"] for g in served["instance_group"]] == [2]
            assert served["dynamic_batching"]["max_queue_delay_microseconds"] == 1500
            assert "count: 2" in reloaded["configs"]["config.pbtxt"], "the rendered config that was loaded"
            assert np.array_equal(jpeg_logits(client, name), before), "the ensemble serves the reloaded classifier"

            with pytest.raises(RuntimeError, match="did not reload tiny: .*KIND_GPU but no GPUs are available"):
                host.reload(replace(START, accelerator="tensorrt"), 60)
            assert client.is_model_ready(name), "Triton keeps the loaded version when the new one fails"
            assert [g["count"] for g in client.get_model_config(name)["instance_group"]] == [2]
            assert np.array_equal(jpeg_logits(client, name), before)
        finally:
            host.stop(20)


def test_a_max_batch_size_setting_bounds_the_classifier_and_the_ensemble() -> None:
    """Not reloadable (the ensemble's bound is set at start): a candidate with another one gets a new process."""
    from serving.triton.host import TritonServerHost

    model = load_config(["model=tiny"]).model
    name = model.name
    with owned_environment():
        host = TritonServerHost(model, replace(START, dynamic_batching=True, max_batch_size=4), "bundled",
                                "127.0.0.1", str(REPO_ROOT / "model_repository"), preprocess_instances=1)
        try:
            started = host.start(180)
            client = triton_http.InferenceServerClient(f"127.0.0.1:{started['endpoints']['http_port']}")
            served = client.get_model_config(name)
            assert served["max_batch_size"] == 4
            assert client.get_model_config(ensemble_model_name(name))["max_batch_size"] == 4
            (tensor,) = served["input"]

            def infer(batch: int) -> np.ndarray:
                request = triton_http.InferInput(tensor["name"], [batch, *map(int, tensor["dims"])], "FP32")
                request.set_data_from_numpy(np.zeros((batch, *map(int, tensor["dims"])), dtype=np.float32))
                result = client.infer(name, [request])
                return result.as_numpy(result.get_response()["outputs"][0]["name"])

            assert infer(4).shape[0] == 4
            with pytest.raises(triton_http.InferenceServerException, match="batch-size must be <= 4"):
                infer(8)
        finally:
            host.stop(20)
