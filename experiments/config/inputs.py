"""`experiment.inputs`: which images the requests carry (serving.workloads.image.corpus), checked before any server
starts, and shipped to the clients as an `InputSource`."""

from __future__ import annotations

from experiments.config.errors import ConfigError
from experiments.config.schema import AccuracyConfig, InputsConfig
from serving.workloads.image.corpus import SYNTHETIC, CorpusError, InputSource, image_files, read_labels


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


def check_accuracy(accuracy: AccuracyConfig) -> None:
    bound = accuracy.max_top1_drop
    if bound is not None and not 0 <= float(bound) <= 100:
        raise ConfigError(f"experiment.accuracy.max_top1_drop={bound!r}: points of top-1 a variant may lose, in "
                          "[0, 100] (e.g. 1.0), or null for no bound")
    if int(accuracy.images) < 1:
        raise ConfigError(f"experiment.accuracy.images={accuracy.images!r}: corpus images each path is evaluated on, "
                          "a positive number (e.g. 512)")


def check_inputs(inputs: InputsConfig) -> None:
    """A folder with images and labels for every one of them, sizes that make sense: or one ConfigError."""
    def fail(key: str, value: object, fix: str) -> None:
        raise ConfigError(f"experiment.inputs.{key}={value!r}: {fix}")

    if int(inputs.synthetic_images) < 1:
        fail("synthetic_images", inputs.synthetic_images, "the synthetic corpus's size, a positive number (e.g. 512)")
    if not float(inputs.pool_mib) > 0:
        fail("pool_mib", inputs.pool_mib, "MiB of distinct requests each client builds, > 0 (e.g. 64)")
    if not 0 < float(inputs.audit_max_speedup) < 1:
        fail("audit_max_speedup", inputs.audit_max_speedup, "the share by which a repeated input may be faster "
             "before the stack is flagged, in (0, 1), e.g. 0.1")
    if inputs.source == SYNTHETIC:
        if inputs.labels:
            fail("labels", inputs.labels, "the synthetic corpus has no classes: labels go with a folder of your "
                 "images (experiment.inputs.source=<folder>)")
        return
    try:
        files = image_files(str(inputs.source))
        if inputs.labels:
            read_labels(str(inputs.labels), [f.name for f in files])
    except CorpusError as exc:
        raise ConfigError(str(exc)) from None
