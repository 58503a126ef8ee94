"""The images requests carry: a folder of the user's own (JPEG, PNG, WebP of any size), or the built-in synthetic
corpus (generated from a seed, nothing downloaded).

Distinct inputs matter: a server or proxy that caches answers, a decoder that is fast on one image and slow on
another, preprocessing whose cost follows the image's size: none of it shows when every request carries the same
bytes. So the synthetic corpus varies what a photo collection varies: sizes from thumbnails to 12 MP (most of them
small, as uploads are), aspect ratios, photographic and flat content, JPEG qualities and chroma subsampling.

The corpus is built once per machine (`$TIERBENCH_CACHE`, else `$XDG_CACHE_HOME/tierbench`, else ~/.cache/tierbench,
under `corpus/`) and read from there by every client on the node. Every input format uses it: `jpeg` and
`jpeg_base64` send the encoded files, `tensor` sends them decoded and preprocessed as the model's config says
(`serving.images`), cached beside them per preprocessing.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from serving.images import Preprocessing, decode_and_preprocess

log = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
SYNTHETIC_VERSION = 1  # bump when the generator changes: the cache is keyed by it
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
FOLDER_JPEG_QUALITY = 95  # a PNG or WebP of the user's is sent as a JPEG of this quality (jpeg formats)
MAX_SIDE_PIXELS = 12_000_000  # the synthetic corpus's largest image (a 12 MP phone photo, 4000 x 3000)
THUMBNAIL_PIXELS = 96 * 96
LARGE_SHARE = 0.08  # the share of images above 2 MP: most uploads are small, a few are a camera's full size
ASPECTS = (4 / 3, 3 / 2, 16 / 9, 1.0, 3 / 4, 2 / 3, 9 / 16)


def cache_root() -> Path:
    """Where built corpora live on this node (the compiled engine's cache's parent)."""
    base = os.environ.get("TIERBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tierbench")
    return Path(base) / "corpus"


@dataclass(frozen=True)
class Corpus:
    """Encoded images (JPEG bytes, as the `jpeg` formats send them), with their class labels where the user gave
    them, named by where they came from."""

    name: str
    images: tuple[bytes, ...]
    files: tuple[str, ...]  # each image's file name (a folder's: what the labels file names)
    pixels: tuple[int, ...]  # each image's width x height
    labels: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.images)

    def stats(self) -> dict[str, float]:
        """The corpus's own figures (the report's payload statistics are checked against them)."""
        sizes = np.array([len(image) for image in self.images], dtype=np.float64)
        megapixels = np.array(self.pixels, dtype=np.float64) / 1e6
        return {"corpus_images": float(len(self)), "corpus_bytes_mean": float(sizes.mean()),
                "corpus_bytes_p50": float(np.median(sizes)), "corpus_bytes_min": float(sizes.min()),
                "corpus_bytes_max": float(sizes.max()), "corpus_megapixels_p50": float(np.median(megapixels)),
                "corpus_megapixels_max": float(megapixels.max())}


# --- the synthetic corpus -------------------------------------------------------------------------------------------

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


def _build_synthetic(folder: Path, seed: int, count: int) -> None:
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


@lru_cache(maxsize=4)
def synthetic_corpus(count: int = 512, seed: int = 0) -> Corpus:
    """The synthetic corpus of `count` images from `seed`, built on first use on this node (seconds) and cached."""
    folder = cache_root() / f"synthetic-v{SYNTHETIC_VERSION}-seed{seed}-n{count}"
    if not (folder / "manifest.json").exists():
        log.info("building the synthetic corpus (%d images, seed %d) in %s", count, seed, folder)
        _build_synthetic(folder, seed, count)
    files = tuple(f"{index:05d}.jpg" for index in range(count))
    pixels = tuple(json.loads((folder / "manifest.json").read_text())["pixels"])
    return Corpus(f"{SYNTHETIC}-seed{seed}-n{count}", tuple((folder / f).read_bytes() for f in files), files, pixels)


# --- a folder of the user's -----------------------------------------------------------------------------------------

class CorpusError(ValueError):
    """A folder or labels file that cannot be a corpus; says which key, which value, and the fix."""


def image_files(folder: str) -> list[Path]:
    """The folder's images (JPEG, PNG, WebP), sorted by name; CorpusError when it has none."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise CorpusError(f"experiment.inputs.source={folder!r}: not a folder (give a folder of JPEG, PNG or WebP "
                          f"images, or `{SYNTHETIC}` for the built-in corpus)")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise CorpusError(f"experiment.inputs.source={folder!r}: no images there (.jpg, .jpeg, .png, .webp): add "
                          "some, or use `synthetic`")
    return files


def read_labels(labels_file: str, files: list[str]) -> tuple[int, ...]:
    """Each file's class index from a CSV of `file,class index` rows (a header row allowed); CorpusError naming
    the first file without a label or a row that is not one."""
    path = Path(labels_file).expanduser()
    if not path.is_file():
        raise CorpusError(f"experiment.inputs.labels={labels_file!r}: no such file (a CSV of `file,class index`)")
    by_file: dict[str, int] = {}
    with path.open(newline="") as f:
        for number, row in enumerate(csv.reader(f), 1):
            if not row or (number == 1 and not row[-1].strip().lstrip("-").isdigit()):
                continue  # a blank line, or the header
            if len(row) != 2 or not row[1].strip().isdigit():
                raise CorpusError(f"experiment.inputs.labels={labels_file!r}: line {number} is {row!r}, expected "
                                  "`file,class index` (e.g. `cat.jpg,281`)")
            by_file[Path(row[0].strip()).name] = int(row[1])
    missing = [name for name in files if name not in by_file]
    if missing:
        raise CorpusError(f"experiment.inputs.labels={labels_file!r}: no label for {len(missing)} of the "
                          f"{len(files)} images (first: {missing[0]}): label every image of the folder")
    return tuple(by_file[name] for name in files)


def _as_jpeg(path: Path) -> tuple[bytes, int]:
    """The file as the jpeg formats send it (a JPEG as it is, anything else re-encoded), and its pixel count."""
    data = path.read_bytes()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a broken file
        raise CorpusError(f"experiment.inputs.source: {path} is not an image PIL can read ({exc}): remove it") \
            from None
    pixels = image.width * image.height
    if image.format == "JPEG":
        return data, pixels
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=FOLDER_JPEG_QUALITY)
    return buffer.getvalue(), pixels


@lru_cache(maxsize=4)
def folder_corpus(folder: str, labels_file: str | None = None) -> Corpus:
    files = image_files(folder)
    names = [p.name for p in files]
    labels = read_labels(labels_file, names) if labels_file else None
    encoded = [_as_jpeg(p) for p in files]
    return Corpus(str(Path(folder).expanduser().resolve()), tuple(e[0] for e in encoded), tuple(names),
                  tuple(e[1] for e in encoded), labels)


def load_corpus(source: str, labels: str | None = None, synthetic_images: int = 512, seed: int = 0) -> Corpus:
    """The corpus `experiment.inputs` names: `synthetic` (with `synthetic_images` and `seed`) or a folder."""
    if source == SYNTHETIC:
        if labels:
            raise CorpusError(f"experiment.inputs.labels={labels!r}: the synthetic corpus has no classes to label; "
                              "labels go with a folder of your images (experiment.inputs.source=<folder>)")
        return synthetic_corpus(synthetic_images, seed)
    return folder_corpus(source, labels)


# --- tensors --------------------------------------------------------------------------------------------------------

def _digest(corpus: Corpus, preprocessing: Preprocessing) -> str:
    h = hashlib.sha256(preprocessing.to_json().encode())
    for image in corpus.images:
        h.update(hashlib.sha256(image).digest())
    return h.hexdigest()[:16]


def corpus_tensors(corpus: Corpus, preprocessing: Preprocessing) -> np.ndarray:
    """Every image decoded and preprocessed, [N, 3, height, width] float32: what a `tensor` client sends. Built
    once per node and preprocessing (the decode of a 12 MP JPEG takes a tenth of a second), memory-mapped after."""
    path = cache_root() / "tensors" / f"{_digest(corpus, preprocessing)}.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        log.info("preprocessing the %d images of corpus %s for tensor requests", len(corpus), corpus.name)
        tensors = np.lib.format.open_memmap(f"{path}.{os.getpid()}.tmp", mode="w+", dtype=np.float32,
                                            shape=(len(corpus), 3, preprocessing.height, preprocessing.width))
        for index, image in enumerate(corpus.images):
            tensors[index] = decode_and_preprocess([image], preprocessing)[0]
        tensors.flush()
        del tensors
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    return np.load(path, mmap_mode="r")


# --- requests -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputSource:
    """Where a client's requests come from (`experiment.inputs`, shipped in its ClientSpec)."""

    source: str = SYNTHETIC  # `synthetic`, or a folder of images on the client's node
    labels: str = ""  # a CSV of `file,class index` for the folder's images ("": unlabelled)
    synthetic_images: int = 512
    seed: int = 0
    repeated: bool = False  # every request carries the first one's bytes (the caching audit's twin)
    pool_mib: float = 64.0  # the distinct requests a client builds stop at this many MiB of payload

    def corpus(self) -> Corpus:
        return load_corpus(self.source, self.labels or None, self.synthetic_images, self.seed)


@dataclass(frozen=True)
class RequestInputs:
    """One request's images: the corpus's indices, their encoded files (jpeg formats) or their tensor (tensor
    format), and their labels where the corpus has them."""

    indices: tuple[int, ...]
    images: tuple[bytes, ...] | None = None
    tensor: np.ndarray | None = None
    labels: tuple[int, ...] | None = None


def _image_tensor_shape(shape: tuple[int, ...], preprocessing: Preprocessing) -> bool:
    return tuple(shape) == (3, preprocessing.height, preprocessing.width)


def request_pool(spec, limit: int | None = None) -> list[RequestInputs]:
    """The distinct requests of a client of `spec` (a serving.clients.base.ClientSpec), in the order it sends them:
    request k carries images k*batch .. k*batch+batch-1 of the corpus (wrapping), as many requests as cover the
    corpus once, fewer where their payload would pass `pool_mib` (at least one). One request when `repeated` (the
    request of median file size: data-dependent paths compare at a typical image); at most `limit`. A `tensor` model
    whose input is not an image (3 x height x width) is sent seeded normal tensors."""
    source: InputSource = spec.inputs
    batch = spec.batch_size
    preprocessing = Preprocessing.from_json(spec.preprocessing) if spec.preprocessing else Preprocessing()
    tensor = spec.input_format == "tensor"
    if tensor and not _image_tensor_shape(spec.input_shape, preprocessing):
        count = 1 if source.repeated else max(1, math.ceil(source.synthetic_images / batch))
        request_bytes = batch * math.prod(spec.input_shape) * 4
        count = min(count, limit or count, max(1, int(source.pool_mib * 2**20 // request_bytes)))
        return [RequestInputs((), tensor=np.random.default_rng([source.seed, k]).standard_normal(
            (batch, *spec.input_shape), dtype=np.float32)) for k in range(count)]
    corpus = source.corpus()
    tensors = corpus_tensors(corpus, preprocessing) if tensor else None
    count = math.ceil(len(corpus) / batch)

    def images_of(k: int) -> tuple[int, ...]:
        return tuple((k * batch + j) % len(corpus) for j in range(batch))

    # The repeated input is a typical request, not the corpus's first (a thumbnail): the one of median file size.
    first = (sorted(range(count), key=lambda k: sum(len(corpus.images[i]) for i in images_of(k)))[count // 2]
             if source.repeated else 0)
    budget, used, pool = source.pool_mib * 2**20, 0, []
    for k in range(first, first + (1 if source.repeated else min(count, limit or count))):
        indices = images_of(k)
        labels = tuple(corpus.labels[i] for i in indices) if corpus.labels else None
        if tensors is not None:
            inputs = RequestInputs(indices, tensor=np.ascontiguousarray(tensors[list(indices)]), labels=labels)
            size = inputs.tensor.nbytes
        else:
            inputs = RequestInputs(indices, images=tuple(corpus.images[i] for i in indices), labels=labels)
            size = sum(len(image) for image in inputs.images)
        if pool and used + size > budget:
            break
        pool.append(inputs)
        used += size
    return pool


def prepare_inputs(source: InputSource, preprocessing_json: str, tensors: bool) -> dict[str, float]:
    """Build what the clients of a sweep will read on this node (the corpus, and its tensors where a trial sends
    them) before any trial is timed: on a fresh node this takes seconds of CPU. Returns the corpus's own figures
    and the seconds it took."""
    import time

    start = time.monotonic()
    corpus = source.corpus()
    if tensors:
        corpus_tensors(corpus, Preprocessing.from_json(preprocessing_json) if preprocessing_json else Preprocessing())
    return {**corpus.stats(), "corpus_prepare_s": time.monotonic() - start}
