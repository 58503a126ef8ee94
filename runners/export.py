"""`python -m runners.export model=resnet18`: export the model to ONNX in the Triton model repository and
report how far ONNX Runtime's output is from PyTorch's."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import experiments.config.schema  # noqa: F401 - registers the config schemas
from experiments.config.compose import CONF_DIR
from serving.paths import MODEL_REPOSITORY


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from serving.export import export_onnx

    report = export_onnx(cfg.model, MODEL_REPOSITORY)
    print(f"wrote {report.onnx_path}")
    print(f"ONNX Runtime vs PyTorch on a batch of {report.check_batch_size}: "
          f"max abs difference {report.max_abs_diff:.3g}")


if __name__ == "__main__":
    # An export is not a sweep: no run folder under results_dir, log to the terminal only.
    sys.argv += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
    main()
