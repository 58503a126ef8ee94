"""The backends tierbench serves: one line each, the module holding the backend package's `PACKAGE`
(`serving.package.BackendPackage`). Adding a backend is a folder `serving/<backend>/`, a line here and its variants
file conf/backends/<backend>.yaml; docs/architecture.md#adding-a-backend lists every place it touches."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from serving.package import BackendPackage

if TYPE_CHECKING:
    from serving.inprocess import RuntimeCaller
    from serving.settings import BackendSettings

BACKEND_PACKAGES = (
    "serving.triton.package",
    "serving.triton_stream.package",
    "serving.ray_serve.package",
    "serving.fastapi.package",
    "serving.torchserve.package",
    "serving.endpoint.package",
    "serving.vllm.package",
    "serving.serve_llm.package",
    "serving.serve_transformers.package",
)


@cache
def backend_packages() -> dict[str, BackendPackage]:
    """Every registered package by its name (the `backend` config group's entry)."""
    packages = [import_module(path).PACKAGE for path in BACKEND_PACKAGES]
    return {package.name: package for package in packages}


def backend_settings() -> dict[str, type[BackendSettings]]:
    """Each package's settings class by its name: the schemas of the `backend` config group."""
    return {name: package.settings for name, package in backend_packages().items()}


def ray_node_environment() -> dict[str, str]:
    """What the registered packages ask of the environment of a Ray node tierbench starts (each a default: a user's
    own setting wins)."""
    return {key: value for package in backend_packages().values()
            for key, value in package.ray_node_environment.items()}


def node_fact_kinds() -> tuple[type[Any], ...]:
    """The facts any backend decides by, each once, in registry order: what `describe_node` probes."""
    return tuple(dict.fromkeys(kind for package in backend_packages().values() for kind in package.facts))


def cluster_switches() -> tuple[str, ...]:
    """The cluster-wide switches (`cluster.<key>`) any backend may ask for, each once, in registry order."""
    return tuple(dict.fromkeys(key for package in backend_packages().values() for key in package.cluster_switches))


def runtime_caller(engine: str) -> Callable[..., RuntimeCaller]:
    """The class that times `engine` (a `serving.runtime.Engine`) in-process: the first package whose servers run it
    names it."""
    for package in backend_packages().values():
        if engine in package.runtime_callers:
            return package.runtime_callers[engine]
    raise ValueError(f"no registered backend runs the runtime {engine!r}: nothing times it in-process")
