"""Sample JPEGs and the one preprocessing definition every JPEG path uses.

The photos come from a dependency (matplotlib's sample data: a real photograph), varied by crop, scale and
flip and re-encoded, so JPEG payloads have realistic sizes and content. Nothing is downloaded.
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
from PIL import Image

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
RESIZE_SHORTER_TO = 256
CROP = 224


def preprocess_image(image: Image.Image, crop: int = CROP, resize_to: int = RESIZE_SHORTER_TO) -> np.ndarray:
    """Resize the shorter side to 256 (bilinear), center-crop 224, scale to [0, 1], normalise: CHW float32."""
    image = image.convert("RGB")
    width, height = image.size
    scale = resize_to / min(width, height)
    resized = image.resize((max(crop, round(width * scale)), max(crop, round(height * scale))), Image.BILINEAR)
    left = (resized.width - crop) // 2
    top = (resized.height - crop) // 2
    cropped = resized.crop((left, top, left + crop, top + crop))
    array = np.asarray(cropped, dtype=np.float32) / 255.0
    return ((array - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1).copy()


def decode_and_preprocess(jpegs: list[bytes], crop: int = CROP) -> np.ndarray:
    """A batch [N, 3, crop, crop] float32 from encoded images: every JPEG path calls this (Ray Serve's replica,
    Triton's preprocess model, the cross-backend reference)."""
    return np.stack([preprocess_image(Image.open(io.BytesIO(data)), crop=crop) for data in jpegs])


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
