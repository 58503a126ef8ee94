"""Server-side JPEG input for Triton: a Python-backend preprocess model chained to the classifier by an ensemble.

`<model>_jpeg` (platform `ensemble`) takes a BYTES input `jpeg` of dims [1] (a request carries [B, 1]: one encoded image
per row, any lengths) and returns the classifier's `logits`. Its first step, `<model>_preprocess`, runs
`serving/workloads/image/preprocessing.py` (copied next to its model.py) on the Python backend; the second is the
classifier itself, whatever backend serves it (Python backend + ONNX Runtime in the bundled server, native
ONNX Runtime / TensorRT in NVIDIA's container). Triton requires the ensemble's `max_batch_size` not to exceed its
members', and an (empty) version folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serving.oip.protocol import JPEG_INPUT, jpeg_model_name
from serving.triton.repository import fresh_version_dir, write_config
from serving.workloads.image import preprocessing as image_preprocessing
from serving.workloads.image.preprocessing import Preprocessing

PREPROCESSED = "preprocessed"
PREPROCESS_MODEL_FILE = Path(__file__).parent / "python_backend" / "preprocess.py"
IMAGES_MODULE = Path(image_preprocessing.__file__)  # imports no tierbench module: the stub runs it as a lone file
IMAGES_MODULE_COPY = "tierbench_images.py"
PREPROCESSING_PARAMETER = "preprocessing"  # the model's `Preprocessing`, as JSON


def preprocess_model_name(model_name: str) -> str:
    return f"{model_name}_preprocess"


def ensemble_model_name(model_name: str) -> str:
    return jpeg_model_name(model_name)


def _preprocess_config(classifier: mc.ModelConfig, instance_count: int, preprocessing: Preprocessing
                       ) -> mc.ModelConfig:
    image_input = classifier.input[0]
    config = mc.ModelConfig(name=preprocess_model_name(classifier.name), backend="python",
                            max_batch_size=classifier.max_batch_size)
    config.input.add(name=JPEG_INPUT, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=image_input.name, data_type=image_input.data_type, dims=list(image_input.dims))
    config.instance_group.add(count=instance_count, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.parameters[PREPROCESSING_PARAMETER].string_value = preprocessing.to_json()
    return config


def _ensemble_config(classifier: mc.ModelConfig) -> mc.ModelConfig:
    image_input, logits = classifier.input[0], classifier.output[0]
    config = mc.ModelConfig(name=ensemble_model_name(classifier.name), platform="ensemble",
                            max_batch_size=classifier.max_batch_size)
    config.input.add(name=JPEG_INPUT, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name=logits.name, data_type=logits.data_type, dims=list(logits.dims))
    preprocess = config.ensemble_scheduling.step.add(model_name=preprocess_model_name(classifier.name),
                                                      model_version=-1)
    preprocess.input_map[JPEG_INPUT] = JPEG_INPUT
    preprocess.output_map[image_input.name] = PREPROCESSED
    classify = config.ensemble_scheduling.step.add(model_name=classifier.name, model_version=-1)
    classify.input_map[image_input.name] = PREPROCESSED
    classify.output_map[logits.name] = logits.name
    return config


def render_jpeg_ensemble(classifier: mc.ModelConfig, dest: Path, preprocess_instances: int,
                         preprocessing: Preprocessing) -> list[str]:
    """Write `<model>_preprocess/` (running `preprocessing`, the model's own) and `<model>_jpeg/` into the
    repository `dest`; returns their names."""
    preprocess = _preprocess_config(classifier, preprocess_instances, preprocessing)
    version_dir = fresh_version_dir(dest, preprocess.name)
    shutil.copy(PREPROCESS_MODEL_FILE, version_dir / "model.py")
    shutil.copy(IMAGES_MODULE, version_dir / IMAGES_MODULE_COPY)
    write_config(preprocess, dest / preprocess.name / "config.pbtxt")

    ensemble = _ensemble_config(classifier)
    fresh_version_dir(dest, ensemble.name)
    write_config(ensemble, dest / ensemble.name / "config.pbtxt")
    return [preprocess.name, ensemble.name]
