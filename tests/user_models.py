"""Small models in every format a user brings, generated on the fly (nothing downloaded): for the checks
(tests/test_user_models.py) and real sweeps (tests/test_user_model_sweeps.py).

Each is 64x64 RGB in, 10 logits out, trained (here: seeded) with its own normalisation, so a JPEG path that
preprocessed the ImageNet way would give other logits; the dense head returns another tensor (a detector's kind)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

SIZE = 64
CLASSES = 10
# Not ImageNet's: a JPEG path that ignored model.preprocess would feed the model other numbers.
PREPROCESS = ["model.preprocess.mean=[0.5,0.5,0.5]", "model.preprocess.std=[0.25,0.25,0.25]",
              "model.preprocess.channel_order=BGR", "model.preprocess.resize_shorter_to=72",
              "model.preprocess.interpolation=bicubic"]
SHAPE = [f"model.input_shape=[3,{SIZE},{SIZE}]", f"model.num_classes={CLASSES}"]


class FixedSizeNet(nn.Module):
    """Takes exactly 3x64x64 (its classifier reads a flattened 8x8 map), like most trained heads do."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, stride=8, padding=1), nn.ReLU())
        self.head = nn.Linear(4 * 8 * 8, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


DENSE_OUTPUT = [5, 16]


class DenseHeadNet(nn.Module):
    """A detector's dense head in miniature: per image [DENSE_OUTPUT] (5 values per cell of a 4x4 grid: box and
    score), not a classifier's logits."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, DENSE_OUTPUT[0], 3, stride=16, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x).flatten(2)


def _net(seed: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return FixedSizeNet().eval()


def _example(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, SIZE, SIZE)


def state_dict_file(folder: Path) -> tuple[Path, list[str]]:
    """torchvision-style factory (serving.models.tiny_cnn) with the user's trained weights."""
    from serving.models import tiny_cnn

    torch.manual_seed(5)
    model = tiny_cnn(num_classes=CLASSES)
    for p in model.parameters():  # not the seeded init: the served model must be these weights
        nn.init.normal_(p, std=0.5)
    path = folder / "tiny_finetuned.pt"
    torch.save(model.state_dict(), path)
    return path, ["model=examples/state_dict", "model.name=user_state_dict", "model.factory=serving.models.tiny_cnn",
                  f"model.weights={path}", *SHAPE]


def timm_file(folder: Path) -> tuple[Path, list[str]]:
    import timm

    torch.manual_seed(7)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=CLASSES)
    path = folder / "timm_test_resnet.pt"
    torch.save(model.state_dict(), path)
    return path, ["model=examples/timm", "model.name=user_timm", "model.factory=timm:test_resnet",
                  f"model.weights={path}", "model.preprocess.resize_shorter_to=null", *SHAPE]


def torchscript_file(folder: Path) -> tuple[Path, list[str]]:
    path = folder / "fixed.ts"
    torch.jit.trace(_net(), _example()).save(str(path))
    return path, ["model=examples/torchscript", "model.name=user_torchscript", f"model.path={path}", *SHAPE]


def torch_export_file(folder: Path, max_batch: int = 32, dynamic: bool = True) -> tuple[Path, list[str]]:
    path = folder / f"fixed_{'dyn' if dynamic else 'static'}{max_batch}.pt2"
    shapes = ({0: torch.export.Dim("batch", max=max_batch)},) if dynamic else None
    torch.export.save(torch.export.export(_net(), (_example(),), dynamic_shapes=shapes), str(path))
    return path, ["model=examples/torch_export", "model.name=user_export", f"model.path={path}", *SHAPE]


def onnx_file(folder: Path, dynamic: bool = True) -> tuple[Path, list[str]]:
    """ONNX with its own tensor names (not the exporter's input/logits), read from the file by Triton's config."""
    path = folder / f"fixed_{'dyn' if dynamic else 'static'}.onnx"
    axes = {"pixels": {0: "batch"}, "scores": {0: "batch"}} if dynamic else None
    torch.onnx.export(_net(), (_example(1),), str(path), input_names=["pixels"], output_names=["scores"],
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    return path, ["model=examples/onnx", "model.name=user_onnx", f"model.path={path}", *SHAPE]


def dense_head_files(folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """The dense-head model as TorchScript and as ONNX (own tensor names), each with its overrides (no
    model.output_shape: a test adds it)."""
    torch.manual_seed(11)
    model = DenseHeadNet().eval()
    script, onnx = folder / "dense_head.ts", folder / "dense_head.onnx"
    torch.jit.trace(model, _example()).save(str(script))
    torch.onnx.export(model, (_example(1),), str(onnx), input_names=["pixels"], output_names=["cells"],
                      dynamic_axes={"pixels": {0: "batch"}, "cells": {0: "batch"}}, opset_version=17, dynamo=False)
    return {"torchscript": (script, ["model=examples/torchscript", "model.name=user_dense_head",
                                     f"model.path={script}", *SHAPE]),
            "onnx": (onnx, ["model=examples/onnx", "model.name=user_dense_head_onnx", f"model.path={onnx}", *SHAPE])}


OUTPUT_SHAPE = f"model.output_shape=[{DENSE_OUTPUT[0]},{DENSE_OUTPUT[1]}]"

FORMATS = {"state_dict": state_dict_file, "timm": timm_file, "torchscript": torchscript_file,
           "torch_export": torch_export_file, "onnx": onnx_file}
