"""`experiment.inputs`: which images the requests carry (serving.workloads.image.corpus), checked before any server
starts, and shipped to the clients as an `InputSource`; `experiment.accuracy`, the bound a variant's top-1 is held to.
Both are an image sweep's: a generative sweep leaves them unchecked (and `experiment` refuses what it sets of them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from experiments.config.checks import Checked
from serving.workloads.image.corpus import SYNTHETIC, CorpusError, InputSource, image_files, read_labels
from serving.workloads.registry import workloads

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


def _image_sweep(cfg: TierbenchConfig) -> bool:
    """Whether the experiment's workload sends images (its name is checked by then: `experiment` holds these parts)."""
    return workloads()[cfg.experiment.workload].image_model


@dataclass
class InputsConfig(Checked):
    """What requests carry (serving.workloads.image.corpus; docs/inputs.md): distinct images, sent in turn."""

    # `synthetic` (built-in, seeded) | a folder of JPEG, PNG, WebP images (at the same path on the clients' node)
    source: str = "synthetic"
    labels: str | None = None  # a CSV of `file,class index` for the folder's images: each backend's accuracy
    synthetic_images: int = 512  # the synthetic corpus's size
    seed: int = 0  # the synthetic corpus's seed
    pool_mib: float = 64.0  # each client's distinct requests stop at this much payload (a window may repeat them)
    # The caching audit: each operating point measured twice, with distinct inputs and with one input repeated
    audit: bool = False
    audit_max_speedup: float = 0.10  # a stack whose repeated input's p50 is faster by more than this share is flagged

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """A folder with images and labels for every one of them, sizes that make sense."""
        if not _image_sweep(cfg):
            return []
        if int(self.synthetic_images) < 1:
            return [f"{key}.synthetic_images={self.synthetic_images!r}: the synthetic corpus's size, a positive "
                    "number (e.g. 512)"]
        if not float(self.pool_mib) > 0:
            return [f"{key}.pool_mib={self.pool_mib!r}: MiB of distinct requests each client builds, > 0 (e.g. 64)"]
        if not 0 < float(self.audit_max_speedup) < 1:
            return [f"{key}.audit_max_speedup={self.audit_max_speedup!r}: the share by which a repeated input may be "
                    "faster before the stack is flagged, in (0, 1), e.g. 0.1"]
        if self.source == SYNTHETIC:
            if self.labels:
                return [f"{key}.labels={self.labels!r}: the synthetic corpus has no classes: labels go with a folder "
                        f"of your images ({key}.source=<folder>)"]
            return []
        try:
            files = image_files(str(self.source))
            if self.labels:
                read_labels(str(self.labels), [f.name for f in files])
        except CorpusError as exc:
            return [str(exc)]
        return []


@dataclass
class AccuracyConfig(Checked):
    """How close to the FP32 reference a variant must stay to be chosen (docs/inputs.md, "Accuracy")."""

    # Points of top-1 a variant may lose against the FP32 reference (on the labelled corpus; without labels, its
    # top-1 disagreement with the reference's, in percent); over it a variant is measured and shown, never chosen.
    # null: no bound (the accuracy pass runs only where the corpus has labels).
    max_top1_drop: float | None = None
    images: int = 512  # corpus images each (protocol, input format) path is evaluated on before its group is measured

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if not _image_sweep(cfg):
            return []
        bound = self.max_top1_drop
        if bound is not None and not 0 <= float(bound) <= 100:
            return [f"{key}.max_top1_drop={bound!r}: points of top-1 a variant may lose, in [0, 100] (e.g. 1.0), or "
                    "null for no bound"]
        if int(self.images) < 1:
            return [f"{key}.images={self.images!r}: corpus images each path is evaluated on, a positive number (e.g. "
                    "512)"]
        return []


def input_source(inputs: InputsConfig, repeated: bool = False) -> InputSource:
    """What a client of the experiment builds its requests from (`repeated`: the caching audit's twin)."""
    return InputSource(source=str(inputs.source), labels=str(inputs.labels or ""),
                       synthetic_images=int(inputs.synthetic_images), seed=int(inputs.seed), repeated=repeated,
                       pool_mib=float(inputs.pool_mib))


def inputs_settings(inputs: InputsConfig) -> dict[str, object]:
    """What the inputs add to a trial's identity and params (a change of corpus measures the trials again)."""
    corpus = (f"{SYNTHETIC}-seed{inputs.seed}-n{inputs.synthetic_images}" if inputs.source == SYNTHETIC
              else str(inputs.source))
    return {"inputs": corpus, "inputs_pool_mib": float(inputs.pool_mib),
            **({"inputs_labels": str(inputs.labels)} if inputs.labels else {}),
            **({"audit_max_speedup": float(inputs.audit_max_speedup)} if inputs.audit else {})}


def accuracy_settings(accuracy: AccuracyConfig) -> dict[str, object]:
    """The accuracy bound a trial was chosen under (a param; absent without one)."""
    return {} if accuracy.max_top1_drop is None else {"max_top1_drop": float(accuracy.max_top1_drop)}
