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


def ray_node_environment() -> dict[str, str]:
    """What the registered packages ask of the environment of a Ray node tierbench starts (each a default: a user's
    own setting wins)."""
    return {key: value for package in backend_packages().values()
            for key, value in package.ray_node_environment.items()}


def node_fact_kinds() -> tuple[type[Any], ...]:
    """The facts any backend decides by, each once, in registry order: what `describe_node` probes."""
    return tuple(dict.fromkeys(kind for package in backend_packages().values() for kind in package.facts))
