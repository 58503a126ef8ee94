"""The built-in synthetic corpus's images, generated from a seed (serving.workloads.image.corpus caches them per node).

They vary what a photo collection varies: sizes from thumbnails to 12 MP (most of them small, as uploads are),
aspect ratios, photographic content (crops of real photographs shipped with matplotlib, with a camera's grain),
natural-looking scenes (colour noise with natural images' 1/f^2 spectrum) and flat content (shapes, lines, text),
JPEG qualities and chroma subsampling. Nothing is downloaded.
"""

from __future__ import annotations

import io
import json
import logging
import math
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

log = logging.getLogger(__name__)

VERSION = 1  # bump when the generator changes: cached corpora are keyed by it
MAX_SIDE_PIXELS = 12_000_000  # the synthetic corpus's largest image (a 12 MP phone photo, 4000 x 3000)
THUMBNAIL_PIXELS = 96 * 96
LARGE_SHARE = 0.08  # the share of images above 2 MP: most uploads are small, a few are a camera's full size
ASPECTS = (4 / 3, 3 / 2, 16 / 9, 1.0, 3 / 4, 2 / 3, 9 / 16)


def _size(rng: np.random.Generator, index: int, count: int) -> tuple[int, int]:
    """Width and height: the first image a thumbnail, the last a full 12 MP; between, log-uniform megapixels."""
    if index == 0:
        return 96, 96
    if index == count - 1:
        return 4000, 3000
    low, high = ((2e6, MAX_SIDE_PIXELS) if rng.random() < LARGE_SHARE else (THUMBNAIL_PIXELS, 2e6))
    pixels = math.exp(rng.uniform(math.log(low), math.log(high)))
    aspect = ASPECTS[int(rng.integers(len(ASPECTS)))]
    width = max(16, int(round(math.sqrt(pixels * aspect))))
    return width, max(16, int(round(width / aspect)))


@lru_cache(maxsize=1)
def _photos() -> tuple[Image.Image, ...]:
    """Real photographs shipped with matplotlib (a portrait, a product shot)."""
    from matplotlib import cbook

    photos = []
    for name in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png"):
        with cbook.get_sample_data(name) as f:
            photos.append(Image.open(f).convert("RGB"))
    return tuple(photos)


def _photographic(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A crop of a real photograph, flipped or not, colour-shifted, with a camera's grain at the target size."""
    photo = _photos()[int(rng.integers(len(_photos())))]
    w, h = photo.size
    cw, ch = int(w * rng.uniform(0.4, 1.0)), int(h * rng.uniform(0.4, 1.0))
    left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    crop = photo.crop((left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    shift = rng.uniform(0.8, 1.2, size=3).astype(np.float32)
    base = np.clip(np.asarray(crop.resize((min(size[0], 512), min(size[1], 512)), Image.BILINEAR),
                              dtype=np.float32) * shift, 0, 255).astype(np.uint8)
    return _with_grain(rng, Image.fromarray(base).resize(size, Image.BICUBIC), float(rng.uniform(2, 8)))


def _natural(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A scene with natural images' statistics: colour noise whose power falls as 1/f^2 (clouds, foliage, terrain)."""
    base = 256
    fy, fx = np.meshgrid(np.fft.fftfreq(base), np.fft.rfftfreq(base), indexing="ij")
    falloff = 1.0 / np.maximum(np.hypot(fx, fy), 1.0 / base) ** rng.uniform(1.6, 2.4)
    mix = rng.normal(size=(3, 3)) * 0.4 + np.eye(3)
    fields = []
    for _ in range(3):
        spectrum = falloff * np.exp(2j * np.pi * rng.random(falloff.shape))
        field_ = np.fft.irfft2(spectrum, s=(base, base))
        fields.append((field_ - field_.mean()) / (field_.std() + 1e-9))
    colour = np.tensordot(mix, np.stack(fields), axes=1).transpose(1, 2, 0)
    colour = (colour * rng.uniform(30, 60) + rng.uniform(60, 190, size=3)).clip(0, 255).astype(np.uint8)
    return _with_grain(rng, Image.fromarray(colour).resize(size, Image.BICUBIC), float(rng.uniform(1, 6)))


def _flat(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """Flat content (a screenshot, a chart, a logo): a plain or graded background with sharp shapes and lines."""
    image = Image.new("RGB", size, tuple(int(v) for v in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(image)
    w, h = size
    for _ in range(int(rng.integers(3, 14))):
        x0, x1 = sorted(rng.integers(0, w, 2).tolist())
        y0, y1 = sorted(rng.integers(0, h, 2).tolist())
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        elif kind == 1:
            draw.ellipse((x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)), fill=fill)
        else:
            draw.line((x0, y0, x1, y1), fill=fill, width=max(1, int(min(w, h) * rng.uniform(0.002, 0.02))))
    for row in range(int(rng.integers(0, 6))):  # lines of text-like marks
        y = int(h * (0.1 + 0.15 * row))
        draw.text((int(w * 0.05), y), "tierbench " * int(rng.integers(1, 6)), fill=(0, 0, 0))
    return image


def _with_grain(rng: np.random.Generator, image: Image.Image, sigma: float) -> Image.Image:
    """Sensor noise at the image's own resolution (an upscaled scene alone would be unnaturally smooth)."""
    pixels = np.asarray(image, dtype=np.int16)
    noise = rng.normal(0.0, sigma, size=pixels.shape[:2] + (1,)).astype(np.int16)
    return Image.fromarray(np.clip(pixels + noise, 0, 255).astype(np.uint8))


CONTENT = (_photographic, _natural, _flat)


def synthetic_image(seed: int, index: int, count: int) -> tuple[bytes, int]:
    """Image `index` of the synthetic corpus of `count` images and `seed`: its JPEG bytes and pixel count."""
    rng = np.random.default_rng([seed, index])
    size = _size(rng, index, count)
    image = CONTENT[index % len(CONTENT)](rng, size)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=int(rng.integers(50, 96)),
               subsampling=int(rng.choice([0, 2], p=[0.25, 0.75])))
    return buffer.getvalue(), size[0] * size[1]


def build(folder: Path, seed: int, count: int) -> None:
    """Write the corpus into `folder` (atomically: a half-built corpus is never read)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        pixels = []
        for index in range(count):
            data, n = synthetic_image(seed, index, count)
            (staging / f"{index:05d}.jpg").write_bytes(data)
            pixels.append(n)
            if (index + 1) % 128 == 0:
                log.info("synthetic corpus: %d of %d images", index + 1, count)
        (staging / "manifest.json").write_text(json.dumps({"pixels": pixels}))
        try:
            staging.rename(folder)
        except OSError:  # built meanwhile by another process on this node: theirs stands
            if not (folder / "manifest.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
