"""What a backend package (`serving/<backend>/`) tells the rest of tierbench, through one line of the registry
(`serving/registry.py`): the settings its config entries extend, the facts of a node it decides by, and its rows of
the doctor's table. Everything else of the backend stays in its folder: its `Backend` class is named by its settings'
`_target_`, its clients by the specs it hands out, its deploy files by `Backend.deploy_files`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from serving.node import NodeInfo
    from serving.settings import BackendSettings


class DoctorRow(NamedTuple):
    """One row of `runners.doctor`'s table: what, its version or state, the detail."""

    what: str
    value: str
    detail: str


@dataclass(frozen=True)
class BackendPackage:
    name: str  # the `backend` config group's entry: conf/backends/ names `/backend/<name>@<entry>`
    settings: type[BackendSettings]
    # Facts of a node the backend decides by (each a frozen dataclass with a `KEY` and a `probe()` run on the node;
    # `NodeInfo.facts(kind)`). Packages may share one (the PyTorch servers share `TorchFacts`): it is probed once.
    facts: tuple[type[Any], ...] = ()
    # Its rows of the doctor's table (rows of the same `what` from several packages are shown once).
    doctor_rows: Callable[[NodeInfo], list[DoctorRow]] = lambda node: []
