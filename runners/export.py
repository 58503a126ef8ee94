"""`python -m runners.export model=resnet18`: export the model to ONNX in the Triton model repository and
report how far ONNX Runtime's output is from PyTorch's. A model of your own built in PyTorch (`model=examples/...`;
an ONNX file is served as is) gets what each backend writes beside the file (`BackendPackage.exported`: Triton's
`config.pbtxt`), so `model_repository/<name>/` is what NVIDIA's container serves as is."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import experiments.config.schema  # noqa: F401 - registers the config schemas
from experiments.config.compose import CONF_DIR
from serving.paths import MODEL_REPOSITORY


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from experiments.config.errors import ConfigError
    from experiments.config.model_check import check_model
    from experiments.config.typed import typed
    from serving.export import export_onnx
    from serving.model_config import ModelSource
    from serving.registry import backend_packages

    try:
        model = typed(cfg).model
        check_model(model)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if ModelSource(model.source) is ModelSource.ONNX:
        print(f"model {model.name} is an ONNX file already ({model.path}): Triton serves it as is")
        return
    report = export_onnx(model, MODEL_REPOSITORY)
    print(f"wrote {report.onnx_path}")
    print(f"ONNX Runtime vs PyTorch on a batch of {report.check_batch_size}: "
          f"max abs difference {report.max_abs_diff:.3g}")
    for package in backend_packages().values():
        for path in package.exported(model, Path(report.onnx_path), MODEL_REPOSITORY):
            print(f"wrote {path}")


if __name__ == "__main__":
    # An export is not a sweep: no run folder under results_dir, log to the terminal only.
    sys.argv += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
    main()
