"""The workloads tierbench measures: one line each, the module holding the workload's `WORKLOAD`
(`serving.workloads.workload.Workload`). Adding one is a folder `serving/workloads/<name>/` and a line here."""

from __future__ import annotations

from functools import cache
from importlib import import_module

from serving.workloads.workload import Workload

WORKLOADS = (
    "serving.workloads.image.workload",
    "serving.workloads.generative.workload",
)
DEFAULT = "image"


@cache
def workloads() -> dict[str, Workload]:
    """Every registered workload by its name (`experiment.workload`)."""
    found = [import_module(path).WORKLOAD for path in WORKLOADS]
    return {workload.name: workload for workload in found}


def workload(name: str) -> Workload:
    """The workload `name`; KeyError naming the ones there are."""
    try:
        return workloads()[name]
    except KeyError:
        raise KeyError(f"no workload {name!r}: one of {sorted(workloads())}") from None
