"""Cross-check of the backends: a speed figure means nothing if the fast backend computes something else.

Before a server group is measured, the same inputs go through every (protocol, input format) path its trials
use (one request of `crosscheck.images` images each: the first images of the corpus the load sends) and the
logits are compared with the reference: the model (`serving.models`) in PyTorch, float32, on the CPU (ONNX
Runtime's CPU provider for an ONNX model), fed the same tensor or the same JPEGs preprocessed by
`serving.workloads.image.preprocessing` as the model's config says. The figures (worst path) go on every
trial of the group as `crosscheck_top1_agreement` and `crosscheck_max_abs_diff` (a model that is not a classifier,
`model.output_shape` set, is compared by max abs diff only: it has no top-1); beyond the tolerance for
the backend's arithmetic (`crosscheck.tolerances.<fp32|fp16|bf16|int8>`) the group is not measured: its trials fail
with the figures as the reason.

The requests run in a Ray task on the tier's node, where the client actors run (shared-memory paths need it);
the reference runs in the driver, once per (model, input format, images) for the whole sweep.

Accuracy (where the corpus has labels, or `experiment.accuracy.max_top1_drop` bounds it; a classifier only): each
path also sends the corpus's first `experiment.accuracy.images` images, and its outputs are scored against the
labels (top-1, top-5) beside the reference's on the same images; without labels, the measure is the share of images
whose top-1 matches the reference's. Each trial gets its path's figures and `top1_drop`: the points of top-1 it
loses against the reference (on the labels; without them, its disagreement in percent), which the answer holds to
the bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.results.records import root_cause
from serving.backend import Backend, ServerHandle
from serving.clients.base import ClientSpec
from serving.model_config import ModelConfig
from serving.models import is_classifier, reference_name
from serving.workloads.image.formats import InputFormat

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig
    from experiments.plan import Trial

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PathCheck:
    protocol: str
    input_format: str
    top1_agreement: float | None  # None: not a classifier's logits, compared by max abs diff only
    max_abs_diff: float

    @property
    def name(self) -> str:
        return f"{self.protocol}/{self.input_format}"


def top_k(logits: np.ndarray, labels: np.ndarray, k: int) -> float:
    """The share of rows whose label is among their `k` largest logits."""
    best = np.argpartition(-logits, min(k, logits.shape[1] - 1), axis=1)[:, :k]
    return float(np.mean((best == labels[:, None]).any(axis=1)))


@dataclass(frozen=True)
class PathAccuracy:
    """One path's outputs on the corpus's first images, against the labels and the reference's on the same images."""

    protocol: str
    input_format: str
    images: int
    agreement: float  # the share of images whose top-1 is the reference's
    top1: float | None = None  # shares of the labels hit: with a labelled corpus only
    top5: float | None = None
    reference_top1: float | None = None
    reference_top5: float | None = None

    @classmethod
    def score(cls, protocol: str, input_format: str, served: np.ndarray, reference: np.ndarray,
              labels: np.ndarray | None) -> PathAccuracy:
        agreement = float(np.mean(served.argmax(axis=1) == reference.argmax(axis=1)))
        if labels is None:
            return cls(protocol, input_format, len(served), agreement)
        return cls(protocol, input_format, len(served), agreement, top_k(served, labels, 1), top_k(served, labels, 5),
                   top_k(reference, labels, 1), top_k(reference, labels, 5))

    @property
    def labelled(self) -> bool:
        return self.top1 is not None

    @property
    def top1_drop(self) -> float:
        """Points of top-1 lost against the reference: on the labels, else the top-1 disagreement in percent."""
        if self.labelled:
            return 100 * (self.reference_top1 - self.top1)
        return 100 * (1 - self.agreement)

    def metrics(self) -> dict[str, float]:
        labelled = ({"accuracy_top1": self.top1, "accuracy_top5": self.top5, "reference_top1": self.reference_top1,
                     "reference_top5": self.reference_top5} if self.labelled else {})
        return {"accuracy_images": float(self.images), "reference_top1_agreement": self.agreement,
                "top1_drop": self.top1_drop, **labelled}


@dataclass
class CrosscheckResult:
    numerics: str  # fp32 | fp16 | bf16 | int8: which tolerance applies
    max_abs_diff_allowed: float
    min_top1_agreement: float
    images: int
    paths: list[PathCheck] = field(default_factory=list)
    reference: str = "PyTorch"  # what computed the expected outputs (serving.models.reference_name)

    @property
    def top1_agreement(self) -> float | None:
        agreements = [p.top1_agreement for p in self.paths if p.top1_agreement is not None]
        return min(agreements) if agreements else None

    @property
    def max_abs_diff(self) -> float:
        return max(p.max_abs_diff for p in self.paths)

    @property
    def passed(self) -> bool:
        top1_ok = self.top1_agreement is None or self.top1_agreement >= self.min_top1_agreement
        return top1_ok and self.max_abs_diff <= self.max_abs_diff_allowed

    accuracy: list[PathAccuracy] = field(default_factory=list)  # per path, where the accuracy pass ran

    def metrics(self) -> dict[str, float]:
        top1 = {} if self.top1_agreement is None else {"crosscheck_top1_agreement": self.top1_agreement}
        return {**top1, "crosscheck_max_abs_diff": self.max_abs_diff}

    def metrics_for(self, protocol: str, input_format: str) -> dict[str, float]:
        """The group's figures, and the accuracy of the path a trial of (`protocol`, `input_format`) measured."""
        path = next((a for a in self.accuracy if (a.protocol, a.input_format) == (protocol, input_format)), None)
        return {**self.metrics(), **(path.metrics() if path is not None else {})}

    def summary(self) -> str:
        top1 = ("max abs diff only (not a classifier)" if self.top1_agreement is None
                else f"top-1 agreement {self.top1_agreement:.3f}")
        return f"{top1}, max |diff| {self.max_abs_diff:.3g}"

    def reason(self) -> str:
        worst = max(self.paths, key=lambda p: (p.max_abs_diff, -(p.top1_agreement or 0.0)))
        top1 = ("" if self.top1_agreement is None
                else f"top-1 agreement {self.top1_agreement:.3f} (need >= {self.min_top1_agreement}), ")
        return (f"cross-check failed: outputs differ from the {self.reference} reference on {self.images} images "
                f"beyond the {self.numerics} tolerance: {top1}max |output diff| {self.max_abs_diff:.4g} (allowed "
                f"{self.max_abs_diff_allowed}); worst path {worst.name}. Paths: "
                + ", ".join(f"{p.name}{'' if p.top1_agreement is None else f' top1 {p.top1_agreement:.3f}'} diff "
                            f"{p.max_abs_diff:.4g}" for p in self.paths))


def compare(reference: np.ndarray, actual: np.ndarray, classifier: bool = True) -> tuple[float | None, float]:
    """(top-1 agreement, max absolute difference) of two outputs: [N, classes] logits, or any other [N, ...] tensor
    (`classifier` False), which has no top-1 (None)."""
    if reference.shape != actual.shape:
        raise ValueError(f"the server returned outputs of shape {actual.shape}, the reference {reference.shape}")
    agreement = float(np.mean(reference.argmax(axis=1) == actual.argmax(axis=1))) if classifier else None
    return agreement, float(np.max(np.abs(reference.astype(np.float64) - actual.astype(np.float64))))


def reference_logits(model_cfg: ModelConfig, spec: ClientSpec, reference: Any = None) -> np.ndarray:
    """What the reference (`serving.models.reference_runner`: PyTorch float32 on the CPU, or ONNX Runtime's CPU
    provider for an ONNX model) returns for the payload a client of `spec` sends."""
    from serving.clients.base import jpeg_batch, tensor_batch
    from serving.models import preprocessing, reference_runner
    from serving.workloads.image.preprocessing import decode_and_preprocess

    if InputFormat(spec.input_format).images:  # the same JPEGs, binary or base64: decoded alike
        batch = decode_and_preprocess(jpeg_batch(spec), preprocessing(model_cfg))
    else:
        batch = tensor_batch(spec)
    reference = reference if reference is not None else reference_runner(model_cfg)
    return reference(batch)


def payload_spec(spec: ClientSpec) -> ClientSpec:
    """What a client of `spec` sends, and nothing of how it reaches its server: the reference's cache key."""
    return ClientSpec(target="", url="", model_name="", input_format=spec.input_format, batch_size=spec.batch_size,
                      input_shape=spec.input_shape, output_shape=spec.output_shape, timeout_s=0.0,
                      inputs=spec.inputs, preprocessing=spec.preprocessing)


async def _server_logits(spec: ClientSpec) -> np.ndarray:
    from serving.clients.base import load_client

    client = load_client(spec)
    await client.open()
    try:
        return await client.predict()
    finally:
        await client.close()


def server_logits_on_node(specs: list[ClientSpec]) -> list[np.ndarray]:
    """Runs on the tier node: one request per path, its logits."""
    return [asyncio.run(_server_logits(spec)) for spec in specs]


# The accuracy pass's clients build every request it sends (its pool is not the load's: no budget to stay within).
ACCURACY_POOL_MIB = 1 << 20


def accuracy_spec(spec: ClientSpec) -> ClientSpec:
    return replace(spec, inputs=replace(spec.inputs, pool_mib=ACCURACY_POOL_MIB, repeated=False))


async def _served_outputs(spec: ClientSpec, images: int) -> np.ndarray:
    from serving.clients.base import load_client

    client = load_client(accuracy_spec(spec))
    await client.open()
    try:
        return np.concatenate([await client.predict(k) for k in range(-(-images // spec.batch_size))])[:images]
    finally:
        await client.close()


def served_outputs_on_node(specs: list[ClientSpec], images: int) -> list[np.ndarray]:
    """Runs on the tier node: the corpus's first `images` images through each path, their outputs in order."""
    return [asyncio.run(_served_outputs(spec, images)) for spec in specs]


@lru_cache(maxsize=8)
def _reference_on_corpus(model_json: str, spec: ClientSpec, images: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The reference's outputs on the corpus's first `images` images as a client of `spec` sends them, and their
    labels (None for an unlabelled corpus)."""
    from serving.models import reference_runner
    from serving.workloads.image.corpus import corpus_tensors
    from serving.workloads.image.preprocessing import Preprocessing, decode_and_preprocess

    model_cfg = ModelConfig.from_dict(json.loads(model_json))
    corpus = spec.inputs.corpus()
    prep = Preprocessing.from_json(spec.preprocessing) if spec.preprocessing else Preprocessing()
    reference, chunk, outputs = reference_runner(model_cfg), 32, []
    tensors = None if InputFormat(spec.input_format).images else corpus_tensors(corpus, prep)
    for start in range(0, images, chunk):
        stop = min(images, start + chunk)
        batch = (decode_and_preprocess(list(corpus.images[start:stop]), prep) if tensors is None
                 else np.ascontiguousarray(tensors[start:stop]))
        outputs.append(reference(batch))
    labels = np.array(corpus.labels[:images]) if corpus.labels else None
    return np.concatenate(outputs), labels


def accuracy_images(cfg: TierbenchConfig, reference_model: ModelConfig, spec: ClientSpec) -> int:
    """How many corpus images the accuracy pass sends through each path; 0 where it does not run (no labels and no
    bound, a model that is not a classifier of images)."""
    inputs, accuracy = cfg.experiment.inputs, cfg.experiment.accuracy
    if not (inputs.labels or accuracy.max_top1_drop is not None) or not is_classifier(reference_model):
        return 0
    if len(spec.input_shape) != 3 or not spec.preprocessing:
        return 0
    return min(int(accuracy.images), len(spec.inputs.corpus()))


def accuracy_of_paths(cfg: TierbenchConfig, specs: list[tuple[str, ClientSpec]], ray_options: dict[str, Any],
                      reference_model: ModelConfig) -> list[PathAccuracy]:
    """Each path's outputs on the corpus's first images, scored (module docstring); [] where the pass does not run."""
    import ray

    images = accuracy_images(cfg, reference_model, specs[0][1]) if specs else 0
    if not images:
        return []
    timeout_s = float(cfg.experiment.request_timeout_s) * (len(specs) * -(-images // specs[0][1].batch_size) + 1)
    task = ray.remote(served_outputs_on_node).options(num_cpus=0, **ray_options)
    pending = task.remote([spec for _, spec in specs], images)
    model_json = json.dumps(reference_model.to_dict(), sort_keys=True)
    references = [_reference_on_corpus(model_json, payload_spec(spec), images) for _, spec in specs]
    try:
        served = ray.get(pending, timeout=timeout_s + 300)
    except ray.exceptions.RayTaskError as exc:
        cause = root_cause(exc)
        raise RuntimeError(f"accuracy pass failed: {type(cause).__name__}: {cause}") from None
    return [PathAccuracy.score(protocol, spec.input_format, outputs, reference, labels)
            for (protocol, spec), outputs, (reference, labels) in zip(specs, served, references, strict=True)]


@lru_cache(maxsize=16)
def _cached_reference(model_json: str, spec: ClientSpec) -> np.ndarray:
    return reference_logits(ModelConfig.from_dict(json.loads(model_json)), spec)


def crosscheck_group(cfg: TierbenchConfig, backend: Backend, handle: ServerHandle, trials: list[Trial],
                     ray_options: dict[str, Any], reference_model: ModelConfig) -> CrosscheckResult | None:
    """Check every (protocol, input format) of `trials` against the reference, `reference_model` (the model config
    reading its file from the driver's own copy); None when disabled."""
    import ray

    check_cfg = cfg.crosscheck
    if not check_cfg.enabled or not trials:
        return None
    images = min(int(check_cfg.images), backend.max_request_batch)
    paths = sorted({(t.protocol, t.input_format) for t in trials})
    timeout_s = float(cfg.experiment.request_timeout_s)
    specs = [(protocol, replace(backend.client_spec(handle, protocol, fmt, images), timeout_s=timeout_s))
             for protocol, fmt in paths]
    tolerance = check_cfg.tolerances[backend.numerics]
    task = ray.remote(server_logits_on_node).options(num_cpus=0, **ray_options)
    pending = task.remote([spec for _, spec in specs])
    model_json = json.dumps(reference_model.to_dict(), sort_keys=True)
    # The payload depends on the input format and batch size only, not on the path's URL or protocol.
    references = [_cached_reference(model_json, payload_spec(spec)) for _, spec in specs]
    try:
        actual = ray.get(pending, timeout=timeout_s * (len(specs) + 1) + 120)
    except ray.exceptions.RayTaskError as exc:
        cause = root_cause(exc)
        raise RuntimeError(f"cross-check request failed: {type(cause).__name__}: {cause}") from None
    classifier = is_classifier(reference_model)
    checks = [PathCheck(protocol, spec.input_format, *compare(reference, logits, classifier))
              for (protocol, spec), reference, logits in zip(specs, references, actual, strict=True)]
    result = CrosscheckResult(backend.numerics, float(tolerance.max_abs_diff), float(tolerance.min_top1_agreement),
                              images, checks, reference_name(reference_model))
    if result.passed:
        result.accuracy = accuracy_of_paths(cfg, specs, ray_options, reference_model)
        for path in result.accuracy:
            log.info("%s: %s/%s on %d corpus images: %s", backend.context.name, path.protocol, path.input_format,
                     path.images, (f"top-1 {path.top1:.3f} (reference {path.reference_top1:.3f}), top-5 "
                                   f"{path.top5:.3f}" if path.labelled else
                                   f"top-1 agreement with the reference {path.agreement:.3f}"))
    log.info("%s: cross-check against the %s reference: %s (%s)", backend.context.name, result.reference,
             result.summary(), "ok" if result.passed else "FAILED")
    return result
