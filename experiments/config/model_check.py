"""The model, checked before anything starts: its source and file, and that it takes and returns what the config
says. The file is loaded and run on a batch of 1 and of 2 (a batch size baked in at export shows there), so a
wrong shape or a missing file is one line with the key, the value and the fix, and no server is started.
"""

from __future__ import annotations

import json
from functools import lru_cache

from experiments.config.errors import ConfigError
from serving.model_config import ModelConfig, ModelSource, PreprocessConfig
from serving.models import TIMM_PREFIX, build_model, example_batch, is_classifier, model_file, output_dims
from serving.workloads.image.preprocessing import CHANNEL_ORDERS, INTERPOLATIONS


def check_model(model_cfg: ModelConfig) -> None:
    """Raise ConfigError on the first problem with `model`."""
    sources = [str(s) for s in ModelSource]
    if model_cfg.source not in sources:
        raise ConfigError(f"model.source={model_cfg.source!r} is not allowed: choose from {sources}")
    source = ModelSource(model_cfg.source)
    _check_shapes(model_cfg)
    _check_preprocess(model_cfg.preprocess)
    resize, crop = model_cfg.preprocess.resize_shorter_to, max(model_cfg.input_shape[1:])
    if resize is not None and resize < crop:
        raise ConfigError(f"model.preprocess.resize_shorter_to={resize} is not allowed: smaller than the crop "
                          f"({crop}, from model.input_shape); give a size >= {crop}, or null for the crop / 0.875")
    if source is ModelSource.FACTORY:
        _check_factory(model_cfg)
    elif not model_cfg.path:
        raise ConfigError(f"model.path=None is not allowed: model.source={source} reads a file; set model.path to it")
    elif model_cfg.weights:
        raise ConfigError(f"model.weights={model_cfg.weights!r} is not allowed with model.source={source}: the "
                          "program carries its weights; remove model.weights")
    if model_file(model_cfg) or str(model_cfg.factory or "").startswith(TIMM_PREFIX) or not is_classifier(model_cfg):
        # The probe loads and runs the model: worth it for what the user brings, not for the built-in seeded ones.
        payload = json.dumps(model_cfg.to_dict(), sort_keys=True)
        problem = _probe(payload, *_file_stamp(model_cfg))
        if problem:
            raise ConfigError(problem)


def _check_shapes(model_cfg: ModelConfig) -> None:
    shape = list(model_cfg.input_shape)
    if len(shape) != 3 or shape[0] != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ConfigError(f"model.input_shape={shape} is not allowed: give [3, height, width] (an RGB image, channels "
                          "first), e.g. [3, 384, 384]")
    for key in ("num_classes", "max_batch_size"):
        value = getattr(model_cfg, key)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"model.{key}={value!r} is not allowed: a positive integer")
    dims = model_cfg.output_shape
    if dims is not None and (not dims or not all(isinstance(d, int) and d > 0 for d in dims)):
        raise ConfigError(f"model.output_shape={list(dims)} is not allowed: give the output's dims per image (positive "
                          "integers, e.g. [84, 8400]), or null for a classifier's [num_classes] logits")
    if model_cfg.max_file_mb <= 0:
        raise ConfigError(f"model.max_file_mb={model_cfg.max_file_mb!r} is not allowed: a size in MB > 0")


def _check_preprocess(p: PreprocessConfig) -> None:
    if p.channel_order not in CHANNEL_ORDERS:
        raise ConfigError(f"model.preprocess.channel_order={p.channel_order!r} is not allowed: choose from "
                          f"{list(CHANNEL_ORDERS)} (the order of the model's input channels)")
    if p.interpolation not in INTERPOLATIONS:
        raise ConfigError(f"model.preprocess.interpolation={p.interpolation!r} is not allowed: choose from "
                          f"{list(INTERPOLATIONS)}")
    for key in ("mean", "std"):
        values = getattr(p, key)
        if len(values) != 3:
            raise ConfigError(f"model.preprocess.{key}={list(values)} is not allowed: one value per channel, in RGB "
                              "order, of pixels scaled to [0, 1], e.g. [0.5, 0.5, 0.5]")
    if any(v <= 0 for v in p.std):
        raise ConfigError(f"model.preprocess.std={list(p.std)} is not allowed: every value must be > 0")
    if p.resize_shorter_to is not None and p.resize_shorter_to < 1:
        raise ConfigError(f"model.preprocess.resize_shorter_to={p.resize_shorter_to!r} is not allowed: a size in "
                          "pixels, or null for the crop / 0.875")


def _check_factory(model_cfg: ModelConfig) -> None:
    from hydra.utils import get_method

    factory = model_cfg.factory
    if not factory:
        raise ConfigError("model.factory=None is not allowed: model.source=factory builds the model with it; name a "
                          "callable such as torchvision.models.resnet50, or timm:<model name>")
    if factory.startswith(TIMM_PREFIX):
        try:
            import timm
        except ImportError:
            raise ConfigError(f"model.factory={factory!r} needs timm, which is not installed: pip install timm"
                              ) from None
        if not timm.is_model(factory.removeprefix(TIMM_PREFIX)):
            raise ConfigError(f"model.factory={factory!r} is not a timm model: timm.list_models('*pattern*') lists "
                              "them")
        return
    try:
        get_method(factory)
    except Exception as exc:  # noqa: BLE001 - any import failure means the same thing here
        raise ConfigError(f"model.factory={factory!r} cannot be imported ({exc}): name a callable taking "
                          "(weights=None, num_classes=...), e.g. torchvision.models.resnet50, or timm:<model>"
                          ) from None


def _file_stamp(model_cfg: ModelConfig) -> tuple[int, int]:
    """(size, mtime) of the model's file, so a rewritten file is probed again; ConfigError when it is missing or too
    big to ship."""
    from serving.model_files import absolute_model_path

    path = model_file(model_cfg)
    if not path:
        return 0, 0
    key = f"model.{ModelSource(model_cfg.source).file_key}"
    where = absolute_model_path(path)
    if not where.is_file():
        raise ConfigError(f"{key}={path!r} is not allowed: no such file ({where}); give the path of the model file "
                          "on this machine (relative paths start where the command runs)")
    stat = where.stat()
    if stat.st_size > model_cfg.max_file_mb * 1e6:
        raise ConfigError(f"{key}={path!r} is not allowed: {stat.st_size / 1e6:.0f} MB is more than "
                          f"model.max_file_mb={model_cfg.max_file_mb:g}; each tier job ships it through Ray's object "
                          "store: raise model.max_file_mb if the nodes' object stores hold it")
    return stat.st_size, stat.st_mtime_ns


@lru_cache(maxsize=8)
def _probe(payload: str, size: int, mtime_ns: int) -> str | None:
    """Load and run the model on batches of 1 and 2; the problem in one line, or None. Cached per config and file
    version: a multirun's driver validates each tier's job config."""
    from serving.model_files import absolute_model_path

    model_cfg = ModelConfig.from_dict(json.loads(payload))
    path = model_file(model_cfg)
    if path:
        model_cfg = model_cfg.with_file(str(absolute_model_path(path)))
    if ModelSource(model_cfg.source) is ModelSource.ONNX:
        return _probe_onnx(model_cfg)
    return _probe_torch(model_cfg)


def _load_problem(model_cfg: ModelConfig, exc: Exception) -> str:
    source = ModelSource(model_cfg.source)
    key = "factory" if source is ModelSource.FACTORY and not model_cfg.weights else source.file_key
    how = {ModelSource.FACTORY: "a state_dict saved with torch.save(model.state_dict(), path) from the architecture "
                                f"{model_cfg.factory} with num_classes={model_cfg.num_classes}",
           ModelSource.TORCHSCRIPT: "a file written by torch.jit.save (torch.jit.trace or torch.jit.script)",
           ModelSource.TORCH_EXPORT: "a .pt2 file written by torch.export.save",
           ModelSource.ONNX: "an ONNX file"}[source]
    gist = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return (f"model.{key}={getattr(model_cfg, key)!r} is not allowed: it does not load as model.source={source} "
            f"({type(exc).__name__}: {gist}); give {how}")


def _shape_problem(model_cfg: ModelConfig, batch: int, exc: Exception) -> str:
    gist = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if batch == 1:
        return (f"model.input_shape={list(model_cfg.input_shape)} is not allowed: the model fails on a "
                f"[1, {', '.join(map(str, model_cfg.input_shape))}] input ({type(exc).__name__}: {gist}); set "
                "model.input_shape to the [channels, height, width] it was trained on")
    return _fixed_batch_problem(model_cfg, f"it fails on a batch of {batch} ({type(exc).__name__}: {gist})")


def _fixed_batch_problem(model_cfg: ModelConfig, what: str) -> str:
    source = ModelSource(model_cfg.source)
    fix = {ModelSource.TORCH_EXPORT: "export with a dynamic batch: torch.export.export(model, (x,), dynamic_shapes="
                                     f"({{0: torch.export.Dim('batch', max={model_cfg.max_batch_size})}},))",
           ModelSource.ONNX: "export with a dynamic batch: torch.onnx.export(..., dynamic_axes={'<input>': {0: "
                             "'batch'}, '<output>': {0: 'batch'}}), or lower model.max_batch_size",
           ModelSource.TORCHSCRIPT: "script it (torch.jit.script) or trace code that does not fix the batch size "
                                    "(x.flatten(1), not x.view(1, -1))",
           ModelSource.FACTORY: "fix the model's forward so it takes any batch size"}[source]
    key = f"model.{source.file_key if model_file(model_cfg) else 'factory'}"
    return (f"{key}={getattr(model_cfg, key.split('.')[1])!r} is not allowed: its batch dimension is not dynamic up to "
            f"model.max_batch_size={model_cfg.max_batch_size} ({what}); {fix}")


def _output_problem(model_cfg: ModelConfig, shape: tuple[int, ...], batch: int) -> str | None:
    if tuple(shape) == (batch, *output_dims(model_cfg)):
        return None
    returns = f"the model returns shape {list(shape)} for a batch of {batch}"
    if not shape or shape[0] != batch:
        return _fixed_batch_problem(model_cfg, f"a batch of {batch} returns shape {list(shape)}")
    if not is_classifier(model_cfg):
        return (f"model.output_shape={list(model_cfg.output_shape)} is not allowed: {returns}; set "
                f"model.output_shape={list(shape[1:])}")
    if len(shape) == 2:
        return (f"model.num_classes={model_cfg.num_classes} is not allowed: the model returns {shape[1]} outputs per "
                f"image (shape {list(shape)} for a batch of {batch}); set model.num_classes={shape[1]}")
    return (f"model.output_shape=None is not allowed for this model: {returns}, not a classifier's [batch, "
            f"num_classes] logits; set model.output_shape={list(shape[1:])} (its output per image: cross-checked by "
            "max abs diff only)")


def _probe_torch(model_cfg: ModelConfig) -> str | None:
    import torch

    try:
        model = build_model(model_cfg)
    except Exception as exc:  # noqa: BLE001 - whatever the loader raises is the user's file's problem
        return _load_problem(model_cfg, exc)
    if ModelSource(model_cfg.source) is ModelSource.TORCH_EXPORT:
        problem = _export_batch_problem(model_cfg)
        if problem:
            return problem
    for batch in (1, 2):
        try:
            with torch.inference_mode():
                out = model(example_batch(model_cfg, batch))
        except Exception as exc:  # noqa: BLE001 - a shape the model does not take
            return _shape_problem(model_cfg, batch, exc)
        if not isinstance(out, torch.Tensor):
            return (f"model.source={model_cfg.source} is not allowed for this model: its forward returns "
                    f"{type(out).__name__}, not one tensor; wrap it so forward returns one (the logits, or e.g. a "
                    "detector's outputs concatenated with torch.cat)")
        problem = _output_problem(model_cfg, tuple(out.shape), batch)
        if problem:
            return problem
    return None


def _export_batch_problem(model_cfg: ModelConfig) -> str | None:
    """A torch.export program's batch range, from its own constraints (its guards refuse any other size)."""
    import torch

    program = torch.export.load(model_cfg.path)
    inputs = [node for node in program.graph.nodes
              if node.op == "placeholder" and node.name in program.graph_signature.user_inputs]
    if len(inputs) != 1:
        return (f"model.path={model_cfg.path!r} is not allowed: the program takes {len(inputs)} inputs; tierbench "
                "serves models taking one image batch")
    batch = inputs[0].meta["val"].shape[0]
    if isinstance(batch, int):
        return _fixed_batch_problem(model_cfg, f"it was exported for batch {batch} only")
    upper = program.range_constraints[batch.node.expr].upper
    if upper < model_cfg.max_batch_size:
        return _fixed_batch_problem(model_cfg, f"it was exported for batches up to {upper}")
    return None


def _probe_onnx(model_cfg: ModelConfig) -> str | None:
    import numpy as np
    import onnx
    import onnxruntime as ort

    try:
        graph = onnx.load(model_cfg.path, load_external_data=False).graph
        session = ort.InferenceSession(model_cfg.path, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - whatever the loader raises is the user's file's problem
        return _load_problem(model_cfg, exc)
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        return (f"model.path={model_cfg.path!r} is not allowed: the ONNX graph takes {len(inputs)} inputs "
                f"({[i.name for i in inputs]}); tierbench serves models taking one image batch")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        return (f"model.path={model_cfg.path!r} is not allowed: input {inputs[0].name} is of ONNX type "
                f"{onnx.TensorProto.DataType.Name(tensor.elem_type)}; tierbench sends float32 images")
    dims = tensor.shape.dim
    if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0:
        return _fixed_batch_problem(model_cfg, f"input {inputs[0].name} has batch dimension {dims[0].dim_value}")
    fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims[1:]]
    if any(d is not None and d != want for d, want in zip(fixed, model_cfg.input_shape, strict=False)) \
            or len(fixed) != 3:
        return (f"model.input_shape={list(model_cfg.input_shape)} is not allowed: the ONNX input {inputs[0].name} "
                f"takes [batch, {', '.join(str(d or '?') for d in fixed)}]; set model.input_shape to it")
    for batch in (1, 2):
        try:
            out = session.run(None, {inputs[0].name: example_batch(model_cfg, batch).numpy()})[0]
        except Exception as exc:  # noqa: BLE001 - a shape the model does not take
            return _shape_problem(model_cfg, batch, exc)
        problem = _output_problem(model_cfg, tuple(np.shape(out)), batch)
        if problem:
            return problem
    return None
