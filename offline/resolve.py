"""pip resolves the node's packages (`pip install --dry-run --report` with the node's platform options); this
module only drives it, builds the pure-Python wheels that exist only as sdists, and leaves out what the node keeps.

Why a report and not `pip download` alone: the report holds every package's metadata (its requirements), so what
the node already has (`--keep-installed torch`) can be left out together with what only it needed (torch's CUDA
libraries), which `pip download` cannot be told."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from offline.target import Target

# pip's words when no file of a requirement fits the node (e.g. an sdist-only package under --only-binary :all:)
NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
MAX_SDIST_BUILDS = 20


class ResolutionError(RuntimeError):
    """pip could not resolve a wheel set for the node; the message says which package and what to do."""


@dataclass(frozen=True)
class Package:
    name: str              # canonical
    version: str
    url: str
    sha256: str
    requires: tuple[str, ...]

    @classmethod
    def from_report(cls, item: dict) -> Package:
        metadata, download = item["metadata"], item["download_info"]
        hashes = download.get("archive_info", {}).get("hashes", {})
        return cls(name=canonicalize_name(metadata["name"]), version=metadata["version"], url=download["url"],
                   sha256=hashes.get("sha256", ""), requires=tuple(metadata.get("requires_dist", [])))

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass
class Resolution:
    packages: list[Package]
    built: list[Path] = field(default_factory=list)   # pure wheels built here from sdists


@dataclass(frozen=True)
class Keep:
    """A package the node already has: a name or glob (`nvidia-*`), optionally with its installed version, which
    then pins the resolution so the rest fits it (torchvision for the node's torch)."""
    pattern: str
    version: str | None = None

    @classmethod
    def parse(cls, text: str) -> Keep:
        name, _, version = text.strip().partition("==")
        return cls(canonicalize_name(name) if "*" not in name else name.strip().lower(), version or None)

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)

    @property
    def constraint(self) -> str | None:
        # A public version pins local builds too (2.11.0 matches 2.11.0+cu130: PEP 440).
        return f"{self.pattern}=={self.version.split('+')[0]}" if self.version and "*" not in self.pattern else None


def pip(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True)


def resolve(requirements: list[str], target: Target, pip_args: list[str], work: Path) -> Resolution:
    """Resolve `requirements` for `target`. A package pip finds no fitting wheel for is built from its sdist here
    (hydra-core's antlr4-python3-runtime 4.9.3 exists only as an sdist; tritonclient's geventhttpclient 2.0.2 has no
    cp312 wheel)."""
    built_dir = work / "built"
    built_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(MAX_SDIST_BUILDS):
        report = work / "report.json"
        with tempfile.TemporaryDirectory() as nowhere:
            done = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                       "--target", nowhere, *target.pip_options(), "--find-links", str(built_dir), *pip_args,
                       *requirements)
        if done.returncode == 0:
            items = json.loads(report.read_text())["install"]
            return Resolution([Package.from_report(item) for item in items], sorted(built_dir.glob("*.whl")))
        missing = NO_MATCH.search(done.stderr)
        if not missing:
            raise ResolutionError(f"pip could not resolve the wheel set for {target.slug}:\n{_tail(done.stderr)}")
        build_wheel(missing.group(1).rstrip(";"), built_dir, pip_args, target)
    raise ResolutionError(f"more than {MAX_SDIST_BUILDS} packages needed building from sdists; see {built_dir}")


def build_wheel(requirement: str, into: Path, pip_args: list[str], target: Target) -> Path:
    """Build `requirement`'s wheel from its sdist: with the node's Python where this machine has it (a compiled
    wheel then fits the node: same Python, machine and a glibc as old or older), else with this one, accepting only
    a pure-Python wheel."""
    name = canonicalize_name(Requirement(requirement).name)
    builder = target.local_python()
    with tempfile.TemporaryDirectory() as scratch:
        done = pip("wheel", "--no-deps", "--no-binary", name, "--quiet", "--wheel-dir", scratch, *pip_args,
                   requirement, python=builder or sys.executable)
        wheels = list(Path(scratch).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            hint = (" TensorRT's PyPI packages are sdists that download the real wheels from NVIDIA's index "
                    "(pypi.nvidia.com) when built: build the wheelhouse where that index is reachable "
                    "(--extra-index-url https://pypi.nvidia.com), or leave TensorRT out with the ONNX Runtime-only "
                    "extra (--extra ort-cu12 / ort-cu13; the node then skips the TensorRT variants, saying why)."
                    if name.startswith("tensorrt") else "")
            raise ResolutionError(f"{requirement}: no wheel of it fits the node and its sdist did not build here."
                                  f"{hint}\n{_tail(done.stderr)}")
        wheel = wheels[0]
        if not builder and not wheel.name.endswith("-none-any.whl"):
            raise ResolutionError(f"{requirement}: no wheel of it fits the node, and its sdist compiles ({wheel.name} "
                                  f"here): give the node's Python to build it with (--build-python, a Python "
                                  f"{target.python} on this {target.machine} machine), or check --python and "
                                  "--platform against the node")
        return Path(wheel.replace(into / wheel.name))


def leave_out_kept(packages: list[Package], roots: list[Requirement], keep: list[Keep],
                   target: Target) -> tuple[list[Package], list[Package]]:
    """Split the resolution into what the wheelhouse holds and what the node keeps: the kept packages and those
    only they require (reached from the roots without passing through a kept package). A glob (`nvidia-*`, for the
    CUDA libraries an image has) never keeps one of the roots themselves (nvidia-pytriton, nvidia-ml-py): a root
    is kept only by its name."""
    by_name = {package.name: package for package in packages}
    root_names = {canonicalize_name(root.name) for root in roots}
    environment = target.marker_environment(dict(default_environment()))
    active: dict[str, set[str]] = {}
    pending = [(canonicalize_name(root.name), set(root.extras)) for root in roots if _applies(root, environment, "")]
    while pending:
        name, extras = pending.pop()
        if name not in by_name or any(rule.matches(name) and (name not in root_names or "*" not in rule.pattern)
                                      for rule in keep):
            continue
        new = extras - active[name] if name in active else extras | {""}   # "": the package's own requirements
        if not new:
            continue
        active.setdefault(name, set()).update(new)
        for line in by_name[name].requires:
            requirement = Requirement(line)
            if any(_applies(requirement, environment, extra) for extra in new):
                pending.append((canonicalize_name(requirement.name), set(requirement.extras)))
    held = [package for package in packages if package.name in active]
    kept = [package for package in packages if package.name not in active]
    return held, kept


def _applies(requirement: Requirement, environment: dict[str, str], extra: str) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({**environment, "extra": extra})


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(line for line in text.strip().splitlines()[-lines:] if "is ignored: it is neither" not in line)
