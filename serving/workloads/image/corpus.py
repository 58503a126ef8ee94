"""The images requests carry: a folder of the user's own (JPEG, PNG, WebP of any size), or the built-in synthetic
corpus (`serving.workloads.image.synthetic`: generated from a seed, nothing downloaded).

Distinct inputs matter: a server or proxy that caches answers, a decoder that is fast on one image and slow on
another, preprocessing whose cost follows the image's size: none of it shows when every request carries the same
bytes. So the synthetic corpus varies what a photo collection varies: sizes from thumbnails to 12 MP (most of them
small, as uploads are), aspect ratios, photographic and flat content, JPEG qualities and chroma subsampling.

The corpus is built once per machine (`$TIERBENCH_CACHE`, else `$XDG_CACHE_HOME/tierbench`, else ~/.cache/tierbench,
under `corpus/`) and read from there by every client on the node. Every input format uses it: `jpeg` and
`jpeg_base64` send the encoded files, `tensor` sends them decoded and preprocessed as the model's config says
(`serving.workloads.image.preprocessing`), cached beside them per preprocessing.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from serving import paths
from serving.workloads.image import synthetic
from serving.workloads.image.preprocessing import Preprocessing, decode_and_preprocess

log = logging.getLogger(__name__)

SYNTHETIC = "synthetic"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
FOLDER_JPEG_QUALITY = 95  # a PNG or WebP of the user's is sent as a JPEG of this quality (jpeg formats)


def cache_root() -> Path:
    """Where built corpora live on this node."""
    return paths.cache_root() / "corpus"


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

@lru_cache(maxsize=4)
def synthetic_corpus(count: int = 512, seed: int = 0) -> Corpus:
    """The synthetic corpus of `count` images from `seed`, built on first use on this node (seconds) and cached."""
    folder = cache_root() / f"synthetic-v{synthetic.VERSION}-seed{seed}-n{count}"
    if not (folder / "manifest.json").exists():
        log.info("building the synthetic corpus (%d images, seed %d) in %s", count, seed, folder)
        synthetic.build(folder, seed, count)
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
