"""Bring your own model: every source loads, is checked before anything starts (one line naming the key, the value
and the fix), is preprocessed as its config says on every JPEG path, and travels to the node as a staged copy."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.config.compose import load_config, options
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.models import build_model, preprocessing, reference_runner
from serving.workloads.image.preprocessing import sample_jpegs
from tests import user_models

SMALL = ["experiment.batch_sizes=[1]"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    folder = tmp_path_factory.mktemp("user_models")
    return {name: make(folder) for name, make in user_models.FORMATS.items()}


def _refusal(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        validate(load_config([*overrides, *SMALL]))
    return str(caught.value)


def test_every_model_example_config_is_an_option_and_documents_itself() -> None:
    examples = [m for m in options("model") if m.startswith("examples/")]
    assert sorted(examples) == [f"examples/{name}" for name in sorted(user_models.FORMATS)]
    for name in examples:
        text = (Path("conf/model") / f"{name}.yaml").read_text()
        assert text.startswith("#"), f"conf/model/{name}.yaml should say how to make its file"


@pytest.mark.parametrize("name", list(user_models.FORMATS))
def test_each_source_validates_and_computes_what_the_file_holds(files, name) -> None:
    path, overrides = files[name]
    cfg = load_config([*overrides, *SMALL])
    validate(cfg)
    batch = np.random.default_rng(0).standard_normal((3, 3, 64, 64), dtype=np.float32)
    logits = reference_runner(cfg.model)(batch)
    assert logits.shape == (3, user_models.CLASSES)
    if name == "state_dict":  # the file's weights, not the factory's seeded ones
        seeded = build_model(load_config([*overrides, "model.weights=null"]).model)
        with torch.inference_mode():
            assert not np.allclose(seeded(torch.from_numpy(batch)).numpy(), logits, atol=1e-3)
    if name == "onnx":  # ONNX Runtime runs the file the user exported, names and all
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(["scores"], {"pixels": batch})[0], logits)
    else:  # ONNX export of a PyTorch source (what Triton serves) matches it
        from serving.export import export_onnx

        report = export_onnx(cfg.model, path.parent / f"repo_{name}")
        assert report.max_abs_diff < 1e-4


def test_a_missing_file_is_refused_naming_the_key(tmp_path) -> None:
    message = _refusal(["model=examples/onnx", f"model.path={tmp_path}/nope.onnx"])
    assert message.startswith("model.path=") and "no such file" in message and "nope.onnx" in message
    message = _refusal(["model=examples/state_dict", f"model.weights={tmp_path}/gone.pt"])
    assert message.startswith("model.weights=") and "no such file" in message


def test_wrong_shapes_are_refused_with_the_fix(files, tmp_path) -> None:
    _, torchscript = files["torchscript"]
    message = _refusal([*torchscript, "model.input_shape=[3,224,224]"])
    assert message.startswith("model.input_shape=[3, 224, 224] is not allowed: the model fails on a [1, 3, 224, 224]")
    message = _refusal([*torchscript, "model.num_classes=1000"])
    assert message.startswith("model.num_classes=1000") and "set model.num_classes=10" in message
    _, onnx = files["onnx"]
    message = _refusal([*onnx, "model.input_shape=[3,96,96]"])
    assert "takes [batch, 3, 64, 64]" in message and "set model.input_shape" in message


def test_a_model_that_is_not_a_classifier_is_served_with_its_output_shape(tmp_path) -> None:
    """A detector-like output ([batch, 5, 16] here) is accepted once model.output_shape gives its dims; without them,
    or with others, it is refused naming model.output_shape and the dims the model returns."""
    batch = np.random.default_rng(0).standard_normal((3, 3, 64, 64), dtype=np.float32)
    for name, (_, overrides) in user_models.dense_head_files(tmp_path).items():
        message = _refusal(overrides)
        assert message.startswith("model.output_shape=None is not allowed"), (name, message)
        assert "set model.output_shape=[5, 16]" in message and "max abs diff only" in message, message
        message = _refusal([*overrides, "model.output_shape=[16,5]"])
        assert message.startswith("model.output_shape=[16, 5] is not allowed: the model returns shape [1, 5, 16]")
        assert message.endswith("set model.output_shape=[5, 16] (docs/troubleshooting.md#bad-input)"), message
        cfg = load_config([*overrides, user_models.OUTPUT_SHAPE, *SMALL])
        validate(cfg)
        assert reference_runner(cfg.model)(batch).shape == (3, *user_models.DENSE_OUTPUT), name
    for bad in ("[]", "[4,0]"):
        message = _refusal([f"model.output_shape={bad}"])
        assert message.startswith(f"model.output_shape={bad.replace(',', ', ')} is not allowed"), message
        assert "or null for a classifier" in message


def test_a_fixed_batch_is_refused_with_how_to_export_a_dynamic_one(tmp_path) -> None:
    _, static_onnx = user_models.onnx_file(tmp_path, dynamic=False)
    message = _refusal(static_onnx)
    assert "batch dimension is not dynamic" in message and "dynamic_axes" in message
    _, small_export = user_models.torch_export_file(tmp_path, max_batch=8)
    message = _refusal(small_export)
    assert "exported for batches up to 8" in message and "Dim('batch', max=32)" in message
    _, static_export = user_models.torch_export_file(tmp_path, dynamic=False)
    assert "batch dimension is not dynamic" in _refusal(static_export)


def test_a_file_that_is_not_the_declared_source_is_refused(files, tmp_path) -> None:
    onnx_path, _ = files["onnx"]
    message = _refusal(["model=examples/torchscript", f"model.path={onnx_path}", *user_models.SHAPE])
    assert message.startswith("model.path=") and "does not load as model.source=torchscript" in message
    message = _refusal(["model=examples/state_dict", f"model.weights={files['timm'][0]}", *user_models.SHAPE,
                        "model.factory=serving.models.tiny_cnn"])
    assert message.startswith("model.weights=") and "state_dict" in message


def test_bad_model_keys_are_refused() -> None:
    assert _refusal(["model.source=keras"]).startswith("model.source='keras' is not allowed")
    assert _refusal(["model.factory=timm:no_such_net"]).startswith("model.factory='timm:no_such_net'")
    assert _refusal(["model.factory=torchvision.models.nope"]).startswith("model.factory='torchvision.models.nope'")
    assert _refusal(["model.preprocess.channel_order=GBR"]).startswith("model.preprocess.channel_order='GBR'")
    assert _refusal(["model.preprocess.resize_shorter_to=200"]).startswith("model.preprocess.resize_shorter_to=200")
    assert _refusal(["model.preprocess.std=[0.2,0,0.2]"]).startswith("model.preprocess.std=")
    assert _refusal(["model=examples/onnx", "model.path=x.onnx", "model.max_file_mb=0"]).startswith(
        "model.max_file_mb=0")


def test_a_file_over_the_shipping_limit_is_refused_up_front(files) -> None:
    _, overrides = files["torchscript"]
    message = _refusal([*overrides, "model.max_file_mb=0.001"])
    assert "more than model.max_file_mb=0.001" in message and "object store" in message


def test_model_preprocessing_is_torchvisions_for_what_the_config_says() -> None:
    """The JPEG paths' preprocessing equals the torchvision transforms a model with this config was trained with,
    bit for bit (so the server's logits are the model's in-process logits)."""
    from PIL import Image
    from torchvision import transforms as T

    cfg = load_config([*user_models.SHAPE, *user_models.PREPROCESS]).model
    trained_with = T.Compose([T.Resize(72, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(64),
                              T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
    from serving.workloads.image.preprocessing import preprocess_image

    for jpeg in sample_jpegs():
        image = Image.open(io.BytesIO(jpeg))
        expected = trained_with(image.convert("RGB")).numpy()[::-1]  # BGR: the model's channel order
        np.testing.assert_array_equal(preprocess_image(image, preprocessing(cfg)), expected)


def test_preprocessing_reaches_every_jpeg_path_from_the_config(tmp_path, monkeypatch) -> None:
    """Ray Serve's replica and Triton's rendered preprocess model both run the model's preprocessing."""
    from serving.triton.ensemble import render_jpeg_ensemble
    from serving.triton.repository import read_config
    from tests.test_preprocessing_paths import load_rendered_preprocess_model

    cfg = load_config([*user_models.SHAPE, *user_models.PREPROCESS]).model
    wanted = preprocessing(cfg)
    classifier = read_config(Path("model_repository/tiny/config.pbtxt"))
    classifier.input[0].dims[:] = [3, 64, 64]
    render_jpeg_ensemble(classifier, tmp_path, 1, wanted)
    # The stub loads its own copy of serving/workloads/image/preprocessing.py: compare the values, not the classes.
    assert load_rendered_preprocess_model(tmp_path, "tiny", monkeypatch).preprocessing.to_json() == wanted.to_json()

    from serving.ray_serve.deployment import TorchImageClassifier

    replica = TorchImageClassifier.func_or_class(load_config(["model=tiny", *user_models.SHAPE,
                                                           *user_models.PREPROCESS]).model.to_dict(),
                                                 "cpu", 1)
    assert replica.service.preprocessing == wanted
