"""The layers the folder names promise, read from every import of the code (those inside functions and under
TYPE_CHECKING included): runners -> experiments -> serving, the engine's own floors inside experiments/, each backend
package on its own; and every registered backend package declares what the rest of tierbench finds it by."""

from __future__ import annotations

import ast
import dataclasses
import tomllib
from functools import cache
from pathlib import Path

import pytest
import yaml

from serving.backend import Backend
from serving.paths import REPO_ROOT
from serving.registry import BACKEND_PACKAGES, backend_packages
from serving.settings import BackendSettings

# The engine's floors, lowest first: a part of experiments/ imports only from the floors below it (and itself).
EXPERIMENTS_FLOORS = (("config",), ("plan", "cluster", "prices"), ("measure",), ("results",), ("report",), ("run",))
# What serving/ holds beside the backend packages (shared by them, or by the engine).
SHARED_SERVING = ("clients", "oip", "pytorch", "generation", "tritonserver")
# Of those, what the backend packages alone share (the PyTorch model behind a server): named by them only, like a
# backend's own modules.
BACKENDS_ONLY = ("pytorch", "tritonserver")


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, wherever the import stands in it."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's own package up
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from serving import prometheus`
    return found


@cache
def project_imports() -> dict[str, set[str]]:
    """Each source file of runners/, experiments/ and serving/ (generated gRPC modules aside), by its path from the
    repository root, and the project modules it imports."""
    out = {}
    for top in ("runners", "experiments", "serving"):
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            if "_pb2" not in path.name:
                out[path.relative_to(REPO_ROOT).as_posix()] = {
                    m for m in imports_of(path) if m.split(".")[0] in ("runners", "experiments", "serving")}
    return out


def violations(files: str, forbidden: tuple[str, ...]) -> list[str]:
    """`file -> module` for every import of a module under `forbidden` by a file under `files` (a name imported
    from it not said again)."""
    found = []
    for path, modules in project_imports().items():
        if not path.startswith(files):
            continue
        hits = [m for m in modules if any(m == f or m.startswith(f"{f}.") for f in forbidden)]
        found += [f"{path} -> {m}" for m in sorted(hits) if not any(m.startswith(f"{h}.") for h in hits)]
    return found


def test_imports_flow_from_runners_to_experiments_to_serving() -> None:
    assert not violations("serving/", ("experiments", "runners")), "serving/ is the bottom layer"
    assert not violations("experiments/", ("runners",)), "experiments/ is below the entry points"


def floor_of(part: str) -> int:
    return next(i for i, floor in enumerate(EXPERIMENTS_FLOORS) if part in floor)


def test_each_part_of_the_engine_imports_only_the_floors_below_it() -> None:
    parts = {p.stem if p.is_file() else p.name for p in (REPO_ROOT / "experiments").iterdir()
             if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert parts == {part for floor in EXPERIMENTS_FLOORS for part in floor}, "a new part of experiments/ needs a floor"
    wrong = []
    for part in sorted(parts):
        allowed = {other for floor in EXPERIMENTS_FLOORS[:floor_of(part)] for other in floor} | {part}
        forbidden = tuple(f"experiments.{other}" for other in sorted(parts - allowed))
        wrong += violations(f"experiments/{part}", forbidden)
    assert not wrong, f"imports that run up the engine's floors ({EXPERIMENTS_FLOORS}): {wrong}"


def test_a_backend_package_imports_no_other_backend_package() -> None:
    names = set(backend_packages())
    wrong = []
    for name in sorted(names):
        wrong += violations(f"serving/{name}/", tuple(f"serving.{other}" for other in sorted(names - {name})))
    assert not wrong, f"what two backends share belongs in serving/ beside them ({SHARED_SERVING}): {wrong}"


def test_only_its_package_and_the_registry_name_a_backends_modules() -> None:
    """The engine, the entry points and serving's shared modules reach a backend through its registry entry (its
    `BackendPackage` hooks, the class its settings' `_target_` names), never by importing its modules: only its own
    folder and serving/registry.py name them, and only the backend packages name what they alone share."""
    backends = sorted(backend_packages())
    wrong = []
    for name in backends:
        wrong += [v for v in violations("", (f"serving.{name}",))
                  if not v.startswith((f"serving/{name}/", "serving/registry.py "))]
    for name in BACKENDS_ONLY:
        wrong += [v for v in violations("", (f"serving.{name}",))
                  if not v.startswith((f"serving/{name}/", *(f"serving/{b}/" for b in backends)))]
    assert not wrong, f"a backend's modules named outside its package (add a hook to serving/package.py): {wrong}"


@pytest.mark.parametrize("name", list(backend_packages()))
def test_every_registered_backend_package_declares_its_hooks(name: str) -> None:
    package = backend_packages()[name]
    assert f"serving.{name}.package" in BACKEND_PACKAGES, "one registry line: serving.<backend>.package"
    assert issubclass(package.settings, BackendSettings) and package.settings is not BackendSettings
    target = next(f.default for f in dataclasses.fields(package.settings) if f.name == "_target_")
    module, _, cls = target.rpartition(".")
    assert module.startswith(f"serving.{name}."), f"its Backend lives in its folder: {target}"
    from hydra.utils import get_class

    assert issubclass(get_class(target), Backend), f"{target} is a serving.backend.Backend"
    # The names of its processes (the leak checks); a backend that starts none (an endpoint) says so in its settings.
    assert all(package.process_names), "no empty process name"
    assert bool(package.process_names) == package.settings.launches_server, \
        "a backend that starts servers names their processes; one that starts none (launches_server=False) names none"

    variants = REPO_ROOT / "conf" / "backends" / f"{name}.yaml"
    assert variants.is_file(), f"its variants file: {variants.relative_to(REPO_ROOT)}"
    defaults = [d for d in yaml.safe_load(variants.read_text())["defaults"] if d != "_self_"]
    assert defaults and all(d.startswith(f"/backend/{name}@") for d in defaults), \
        f"its file holds its own entries only (/backend/{name}@<entry>): {defaults}"

    if package.extra is not None:
        extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        assert package.extra in extras, f"pyproject.toml has no extra {package.extra!r}"

    # The cluster's switches it may ask for are keys users type (`cluster.<key>`): each a field of the cluster's schema.
    from experiments.config.schema import ClusterConfig

    switches = {f.name: f for f in dataclasses.fields(ClusterConfig)}
    for switch in package.cluster_switches:
        assert switch in switches and switches[switch].default is None, \
            f"cluster.{switch}: a field of ClusterConfig, null until settled (`BackendSettings.cluster_needs`)"
    needs = {key for f in dataclasses.fields(package.settings) if f.type in ("bool", bool)
             for key in dataclasses.replace(package.settings(), **{f.name: True}).cluster_needs()}
    assert needs <= set(package.cluster_switches), f"its settings ask for switches it does not declare: {needs}"


def test_the_registry_is_all_there_is_of_backends_in_the_config_tree() -> None:
    """Every file of conf/backends/ but default.yaml is a registered backend's variants file."""
    files = {p.stem for p in (REPO_ROOT / "conf" / "backends").glob("*.yaml")} - {"default"}
    assert files == set(backend_packages())


def test_every_registered_workload_is_one_folder_found_by_one_registry_line() -> None:
    """A workload is `serving/workloads/<name>/` holding its `WORKLOAD` in workload.py, imports no other workload's
    package nor a backend's (a backend may import a workload's modules, never the other way), and declares only figures
    of its own (none the engine's catalog already has)."""
    from experiments.measure import catalog
    from serving.workloads.registry import WORKLOADS, workloads

    names = set(workloads())
    assert {path.split(".")[2] for path in WORKLOADS} == names, "one line each: serving.workloads.<name>.workload"
    assert all(path == f"serving.workloads.{path.split('.')[2]}.workload" for path in WORKLOADS)
    wrong = []
    for name in sorted(names):
        wrong += violations(f"serving/workloads/{name}/", tuple(f"serving.workloads.{other}"
                                                               for other in sorted(names - {name})))
    assert not wrong, f"a workload's package imports no other workload's: {wrong}"
    backends = tuple(f"serving.{name}" for name in sorted(backend_packages()))
    wrong = violations("serving/workloads/", backends)
    assert not wrong, f"a workload serves every backend that speaks it, so it imports none: {wrong}"
    engine_own = {m.name for m in catalog.METRICS} - {m.name for w in workloads().values() for m in w.metrics}
    for workload in workloads().values():
        clash = sorted({m.name for m in workload.metrics} & engine_own)
        assert not clash, f"workload {workload.name} declares figures the catalog has: {clash}"
        assert workload.throughput in {m.name for m in catalog.METRICS}, "its throughput is a declared metric"
        assert workload.cost in {m.name for m in catalog.METRICS}, "its cost is a declared metric"
