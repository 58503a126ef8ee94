"""What the project asks pip for, read from pyproject.toml (its one definition): the dependencies, the extras
(self-references like `tierbench[cpu]` expanded) and the build backend an editable install needs offline."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from offline.target import Target, TargetError


@dataclass(frozen=True)
class Project:
    name: str
    requires_python: SpecifierSet
    dependencies: tuple[Requirement, ...]
    extras: dict[str, tuple[Requirement, ...]]
    build_requires: tuple[Requirement, ...]

    @classmethod
    def read(cls, pyproject: Path) -> Project:
        data = tomllib.loads(pyproject.read_text())
        project = data["project"]
        optional = project.get("optional-dependencies", {})
        return cls(name=canonicalize_name(project["name"]),
                   requires_python=SpecifierSet(project.get("requires-python", "")),
                   dependencies=tuple(map(Requirement, project.get("dependencies", []))),
                   extras={extra: tuple(map(Requirement, reqs)) for extra, reqs in optional.items()},
                   build_requires=tuple(map(Requirement, data.get("build-system", {}).get("requires", []))))

    def check_python(self, target: Target) -> None:
        if f"{target.python}.0" not in self.requires_python:
            raise TargetError(f"--python {target.python!r}: {self.name} needs Python {self.requires_python} "
                              "(requires-python in pyproject.toml); the node needs a Python in that range")

    def requirements(self, extras: list[str]) -> list[Requirement]:
        """The dependencies, those of `extras` (following self-references) and the build requirements: every root
        an offline `pip install -e '.[extras]'` resolves from."""
        roots = [*self.dependencies, *self.build_requires]
        seen: set[str] = set()
        pending = list(extras)
        while pending:
            extra = pending.pop()
            if extra in seen:
                continue
            seen.add(extra)
            for requirement in self.extras[extra]:
                if canonicalize_name(requirement.name) == self.name:
                    pending.extend(requirement.extras)
                else:
                    roots.append(requirement)
        return roots
