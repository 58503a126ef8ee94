"""Cross-check of the backends: a speed figure means nothing if the fast backend computes something else.

Before a server group is measured, the same inputs go through every (protocol, input format) path its trials
use (one request of `crosscheck.images` images each: the first images of the corpus the load sends) and the
logits are compared with the reference: the model (`serving.models`) in PyTorch, float32, on the CPU (ONNX
Runtime's CPU provider for an ONNX model), fed the same tensor or the same JPEGs preprocessed by `serving.images`
as the model's config says. The figures (worst path) go on every
trial of the group as `crosscheck_top1_agreement` and `crosscheck_max_abs_diff` (a model that is not a classifier,
`model.output_shape` set, is compared by max abs diff only: it has no top-1); beyond the tolerance for
the backend's arithmetic (`crosscheck.tolerances.<fp32|fp16>`) the group is not measured: its trials fail
with the figures as the reason.

The requests run in a Ray task on the tier's node, where the client actors run (shared-memory paths need it);
the reference runs in the driver, once per (model, input format, images) for the whole sweep.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from serving.backend import Backend, ServerHandle
from serving.clients.base import ClientSpec
from serving.model_config import ModelConfig
from serving.models import is_classifier, reference_name
from serving.protocols import InputFormat

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


@dataclass
class CrosscheckResult:
    numerics: str  # fp32 | fp16: which tolerance applies
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

    def metrics(self) -> dict[str, float]:
        top1 = {} if self.top1_agreement is None else {"crosscheck_top1_agreement": self.top1_agreement}
        return {**top1, "crosscheck_max_abs_diff": self.max_abs_diff}

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
    from serving.images import decode_and_preprocess
    from serving.models import preprocessing, reference_runner

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
        cause = exc.cause if isinstance(exc.cause, BaseException) else exc
        raise RuntimeError(f"cross-check request failed: {type(cause).__name__}: {cause}") from None
    classifier = is_classifier(reference_model)
    checks = [PathCheck(protocol, spec.input_format, *compare(reference, logits, classifier))
              for (protocol, spec), reference, logits in zip(specs, references, actual, strict=True)]
    result = CrosscheckResult(backend.numerics, float(tolerance.max_abs_diff), float(tolerance.min_top1_agreement),
                              images, checks, reference_name(reference_model))
    log.info("%s: cross-check against the %s reference: %s (%s)", backend.context.name, result.reference,
             result.summary(), "ok" if result.passed else "FAILED")
    return result
