"""The image model a sweep serves, as a typed config: the schema of `conf/model/` (registered in Hydra's ConfigStore by
`experiments.config.schema`) and the object every server, host actor and in-process timing receives. It lives
beside the servers because they are its users; it crosses process boundaries (a TorchServe worker, a Serve
replica) as `to_dict()` and comes back with `from_dict()`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from omegaconf import MISSING


class ModelSource(StrEnum):
    FACTORY = "factory"  # `model.factory`, weights from `model.seed` or the state_dict file `model.weights`
    TORCHSCRIPT = "torchscript"  # torch.jit.save / torch.jit.script(...).save: `model.path`
    TORCH_EXPORT = "torch_export"  # torch.export.save (.pt2) with a dynamic batch dimension: `model.path`
    ONNX = "onnx"  # an ONNX file with a dynamic batch dimension: served by Triton as is, no PyTorch

    @property
    def file_key(self) -> str:
        """The config key naming this source's file (`model.weights` may also be null: seeded weights)."""
        return "weights" if self is ModelSource.FACTORY else "path"

    @property
    def pytorch(self) -> bool:
        """Whether PyTorch can run it (Ray Serve's deployment, the torch reference)."""
        return self is not ModelSource.ONNX


@dataclass
class PreprocessConfig:
    """How a JPEG becomes the model's input, as the model was trained: every JPEG path (Ray Serve's replica,
    Triton's preprocess model, the cross-check's reference) uses it
    (`serving.workloads.image.preprocessing.Preprocessing`). The crop is `model.input_shape`'s height and width."""

    resize_shorter_to: int | None = None  # null: the crop / 0.875 (256 for a 224 crop)
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])  # of [0, 1] pixels, in RGB order
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])  # of [0, 1] pixels, in RGB order
    channel_order: str = "RGB"  # RGB | BGR: the order of the model's input channels
    interpolation: str = "bilinear"  # bilinear | bicubic | nearest


@dataclass
class ServedModel:
    """What every model a sweep measures has: its name (the trial param `model`). Each workload's models extend it: an
    image model (`ModelConfig`, below), a language model (`serving.workloads.generative.model.LanguageModelConfig`);
    the files of conf/model/ name their schema (`base_model`, `base_language_model`)."""

    name: str = MISSING  # the model's name: the trial param `model` (each workload's model says what else it names)
    workload: ClassVar[str] = ""  # the workload its requests are (experiment.workload must be it)


@dataclass
class ModelConfig(ServedModel):
    """The image model to serve (a classifier, or any model returning one tensor per batch), from one of
    `serving.model_config.ModelSource`: a factory (torchvision-style or `timm:<name>`) with seeded random or local
    weights, a TorchScript or torch.export program, or an ONNX file. Files are checked before anything starts and
    travel to the tier nodes through Ray's object store."""

    name: str = MISSING  # the Triton model name and the trial param `model`
    workload: ClassVar[str] = "image"
    source: str = "factory"  # ModelSource: factory | torchscript | torch_export | onnx
    # factory: a callable taking (weights=None, num_classes=...), e.g. torchvision.models.resnet18, or timm:<model>
    factory: str | None = None
    weights: str | None = None  # factory: a state_dict file (torch.save); null: random weights drawn from `seed`
    path: str | None = None  # torchscript | torch_export | onnx: the model file
    seed: int = 0  # draws the random weights when `weights` is null: every node builds the same model
    num_classes: int = 1000  # a classifier's outputs per image
    # null: a classifier, [batch, num_classes] logits, cross-checked by top-1 agreement and max abs diff. Any
    # other single output (a detector's head, a segmentation map): its per-image dims, e.g. [84, 8400], compared
    # by max abs diff only (top-1 has no meaning there).
    output_shape: list[int] | None = None
    input_shape: list[int] = field(default_factory=lambda: [3, 224, 224])  # [channels, height, width] of one image
    max_batch_size: int = 32  # the largest batch the model is exported and served for
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    # Bigger files are refused up front: each tier job puts the file in Ray's object store once.
    max_file_mb: float = 2048.0


    def to_dict(self) -> dict[str, Any]:
        """Plain values (JSON-ready) for a process that receives the model by file or argument."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """The config `to_dict` wrote (keys it does not know are refused: a stale writer must not pass silently)."""
        values = dict(values)
        values["preprocess"] = PreprocessConfig(**values.get("preprocess", {}))
        return cls(**values)

    def with_file(self, path: str) -> ModelConfig:
        """A copy reading its file (`weights` or `path`, by source) from `path`: a copy staged on a node."""
        return dataclasses.replace(self, **{ModelSource(self.source).file_key: path})
