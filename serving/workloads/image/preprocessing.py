"""Sample JPEGs and the one preprocessing definition every JPEG path uses.

The photos come from a dependency (matplotlib's sample data: a real photograph), varied by crop, scale and
flip and re-encoded, so JPEG payloads have realistic sizes and content. Nothing is downloaded.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_FRACTION = 0.875  # torchvision's and timm's default: resize to 256, crop 224
INTERPOLATIONS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}
CHANNEL_ORDERS = ("RGB", "BGR")


@dataclass(frozen=True)
class Preprocessing:
    """How an encoded image becomes the model's input: what the model was trained with (`model.preprocess`).

    Plain values only: this module is copied into Triton's Python-backend stub, which has no tierbench package."""

    height: int = 224
    width: int = 224
    resize_shorter_to: int | None = None  # None: the crop's longer side / CROP_FRACTION (256 for 224)
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    channel_order: str = "RGB"  # the order of the model's input channels: RGB, or BGR (OpenCV-trained models)
    interpolation: str = "bilinear"

    @property
    def resize_to(self) -> int:
        return self.resize_shorter_to or round(max(self.height, self.width) / CROP_FRACTION)

    @classmethod
    def from_json(cls, text: str) -> Preprocessing:
        values = json.loads(text)
        return cls(**{**values, "mean": tuple(values["mean"]), "std": tuple(values["std"])})

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


DEFAULT_PREPROCESSING = Preprocessing()


def preprocess_image(image: Image.Image, preprocessing: Preprocessing = DEFAULT_PREPROCESSING) -> np.ndarray:
    """Resize the shorter side, center-crop to the model's input, scale to [0, 1], normalise: CHW float32.

    Sizes and crop offsets are rounded as torchvision's Resize(int) and CenterCrop round them, so a model trained
    with those transforms sees the tensor it was trained on."""
    p = preprocessing
    image = image.convert("RGB")
    width, height = image.size
    short, long = sorted((width, height))
    new_long = int(p.resize_to * long / short)
    size = (p.resize_to, new_long) if width <= height else (new_long, p.resize_to)
    resized = image.resize(size, INTERPOLATIONS[p.interpolation])
    left = int(round((resized.width - p.width) / 2.0))
    top = int(round((resized.height - p.height) / 2.0))
    cropped = resized.crop((left, top, left + p.width, top + p.height))
    array = np.asarray(cropped, dtype=np.float32) / 255.0
    normalised = (array - np.array(p.mean, dtype=np.float32)) / np.array(p.std, dtype=np.float32)
    if p.channel_order == "BGR":
        normalised = normalised[:, :, ::-1]
    return normalised.transpose(2, 0, 1).copy()


def decode_and_preprocess(jpegs: list[bytes], preprocessing: Preprocessing = DEFAULT_PREPROCESSING) -> np.ndarray:
    """A batch [N, 3, height, width] float32 from encoded images: every JPEG path calls this (Ray Serve's replica,
    Triton's preprocess model, the cross-backend reference)."""
    return np.stack([preprocess_image(Image.open(io.BytesIO(data)), preprocessing) for data in jpegs])


@lru_cache(maxsize=4)
def sample_jpegs(count: int = 8, quality: int = 85) -> tuple[bytes, ...]:
    """`count` distinct JPEGs derived deterministically from a real photograph shipped with matplotlib."""
    from matplotlib import cbook

    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = Image.open(f).convert("RGB")
    rng = np.random.default_rng(0)
    images = []
    for i in range(count):
        w, h = photo.size
        crop_w = int(w * rng.uniform(0.6, 1.0))
        crop_h = int(h * rng.uniform(0.6, 1.0))
        left = int(rng.integers(0, w - crop_w + 1))
        top = int(rng.integers(0, h - crop_h + 1))
        variant = photo.crop((left, top, left + crop_w, top + crop_h))
        target = int(rng.integers(256, 480))
        variant = variant.resize((target, int(target * crop_h / crop_w)), Image.BILINEAR)
        if i % 2:
            variant = variant.transpose(Image.FLIP_LEFT_RIGHT)
        buffer = io.BytesIO()
        variant.save(buffer, format="JPEG", quality=quality)
        images.append(buffer.getvalue())
    return tuple(images)
