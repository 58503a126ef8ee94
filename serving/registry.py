"""The backends tierbench serves: one line each, the module holding the backend package's `PACKAGE`
(`serving.package.BackendPackage`). Adding a backend is a folder `serving/<backend>/`, a line here and its variants
file conf/backends/<backend>.yaml; docs/architecture.md#adding-a-backend lists every place it touches."""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import Any

from serving.package import BackendPackage

BACKEND_PACKAGES = (
    "serving.triton.package",
    "serving.ray_serve.package",
    "serving.fastapi.package",
    "serving.torchserve.package",
    "serving.endpoint.package",
)


@cache
def backend_packages() -> dict[str, BackendPackage]:
    """Every registered package by its name (the `backend` config group's entry)."""
    packages = [import_module(path).PACKAGE for path in BACKEND_PACKAGES]
    return {package.name: package for package in packages}


# Ray starts its workers at niceness 15, and every server a host actor starts inherits it (Triton and its Python-backend
# stubs, uvicorn, TorchServe), as do Serve's replicas and proxies: each then runs behind any other busy process on the
# node (Ray's own daemons included), where a deployed server would not. A Ray node tierbench starts runs its workers at
# 0, the priority of a server started by hand.
SERVER_PRIORITY_ENVIRONMENT = {"RAY_worker_niceness": "0"}


def ray_node_environment() -> dict[str, str]:
    """What the servers and the registered packages ask of the environment of a Ray node tierbench starts (each a
    default: a user's own setting wins)."""
    return {**SERVER_PRIORITY_ENVIRONMENT, **{key: value for package in backend_packages().values()
                                             for key, value in package.ray_node_environment.items()}}


def node_fact_kinds() -> tuple[type[Any], ...]:
    """The facts any backend decides by, each once, in registry order: what `describe_node` probes."""
    return tuple(dict.fromkeys(kind for package in backend_packages().values() for kind in package.facts))
