"""The node a wheelhouse is for: its Python, platform tag and CUDA major, validated once, and what follows from
them (pip's cross-platform options, the environment requirement markers are evaluated in, the torch that fits)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# manylinux_2_<glibc minor>_<machine>: the bundled Triton (nvidia-pytriton 0.7.0) ships manylinux_2_35 wheels only,
# so tierbench installs on glibc 2.35 and newer (Ubuntu 22.04+, NVIDIA's containers since 22.x).
PLATFORM = re.compile(r"manylinux_2_(\d+)_(x86_64|aarch64)")
MIN_GLIBC_MINOR = 35
DEFAULT_PLATFORM = "manylinux_2_35_x86_64"
CUDA_MAJORS = (12, 13)
# PyPI's torch builds by CUDA major, from their wheels' metadata (docs/gpu-nodes.md#setting-up-a-node): 2.6-2.10 for
# CUDA 12 (2.8-2.10: 12.8), 2.11 and later for CUDA 13. A node that keeps its own torch (--keep-installed) needs none.
TORCH_FOR_CUDA = {12: ("torch>=2.6,<2.11", "torchvision>=0.21,<0.26"),
                  13: ("torch>=2.11", "torchvision>=0.26")}


class TargetError(ValueError):
    """A wheelhouse option that names no node we can build for; the message names the option, value and fix."""


@dataclass(frozen=True)
class Target:
    python: str           # "3.12"
    platform: str         # a manylinux tag: pip also takes the older manylinux wheels it implies
    cuda: int | None      # the driver's CUDA major; None for CPU nodes

    def __post_init__(self) -> None:
        if not re.fullmatch(r"3\.\d+", self.python):
            raise TargetError(f"--python {self.python!r}: the node's Python as major.minor, e.g. --python 3.12")
        tag = PLATFORM.fullmatch(self.platform)
        if not tag:
            raise TargetError(f"--platform {self.platform!r}: manylinux_2_<glibc minor>_<x86_64|aarch64> of the node "
                              f"(`ldd --version` there), e.g. --platform {DEFAULT_PLATFORM}")
        if int(tag.group(1)) < MIN_GLIBC_MINOR:
            raise TargetError(f"--platform {self.platform!r}: the bundled Triton (nvidia-pytriton 0.7.0) has wheels "
                              f"for glibc 2.{MIN_GLIBC_MINOR} and newer only (manylinux_2_{MIN_GLIBC_MINOR}); the "
                              "node needs a newer image (Ubuntu 22.04+)")
        if self.cuda is not None and self.cuda not in CUDA_MAJORS:
            raise TargetError(f"--cuda {self.cuda!r}: the CUDA major of the node's driver, one of "
                              f"{', '.join(map(str, CUDA_MAJORS))} (`nvidia-smi` shows it; `none` for a CPU node)")

    build_python: str | None = None   # a Python of the node's version on this machine, for sdists that compile

    def local_python(self) -> str | None:
        """The interpreter that builds compiled wheels for the node: --build-python, else pyenv's or PATH's Python
        of the node's version, on a machine of the node's kind; None when this machine has none."""
        if self.build_python:
            return self.build_python
        if platform.machine() != self.machine:
            return None
        candidates = [*map(str, sorted(Path.home().glob(f".pyenv/versions/{self.python}.*/bin/python{self.python}"))),
                      shutil.which(f"python{self.python}")]
        return next((c for c in candidates if c and _runs(c)), None)   # pyenv's shims exist and may refuse to run

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def machine(self) -> str:
        return "x86_64" if self.platform.endswith("x86_64") else self.platform.rsplit("_", 1)[-1]

    @property
    def slug(self) -> str:
        """A folder name that says what the wheelhouse is for, e.g. cp312-cu13-x86_64."""
        return f"{self.abi}-{f'cu{self.cuda}' if self.cuda else 'cpu'}-{self.machine}"

    def compatible_platforms(self) -> list[str]:
        """Every manylinux tag a node of this glibc runs (PEP 600: manylinux_2_Y for Y up to its own, and the
        legacy aliases). pip's --platform takes one tag literally (pip 23-25 widen only manylinux2014/2010), and
        most wheels of older releases are manylinux_2_17 (numpy 1.26.4's for cp312)."""
        glibc_minor = int(self.platform.split("_")[2])
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(glibc_minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{alias}_{self.machine}" for minor, alias in legacy.items()
                 if minor <= glibc_minor and (self.machine == "x86_64" or minor == 17)]
        return [*tags, f"linux_{self.machine}"]   # the last: wheels compiled here for the node (build_wheel)

    def pip_options(self) -> list[str]:
        """pip's options that make it resolve and download for this node instead of the running interpreter."""
        platforms = [option for tag in self.compatible_platforms() for option in ("--platform", tag)]
        return ["--only-binary", ":all:", *platforms, "--python-version", self.python, "--implementation", "cp",
                "--abi", self.abi]

    def marker_environment(self, host: dict[str, str]) -> dict[str, str]:
        """PEP 508 marker values of the node: the host's, with the node's Python and machine."""
        return {**host, "python_version": self.python, "python_full_version": f"{self.python}.0",
                "implementation_version": f"{self.python}.0", "platform_machine": self.machine,
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}

    def torch_requirements(self) -> tuple[str, ...]:
        """The torch and torchvision ranges whose PyPI builds run on this node's CUDA (none for CPU nodes)."""
        return TORCH_FOR_CUDA.get(self.cuda, ()) if self.cuda else ()


def _runs(python: str) -> bool:
    return subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0


def default_extra(cuda: int | None) -> str:
    return f"gpu-cu{cuda}" if cuda else "cpu"


def check_extras(extras: list[str], cuda: int | None, known: set[str]) -> None:
    """Refuse an extra the project lacks, or a CUDA extra for another CUDA major than the node's."""
    for extra in extras:
        if extra not in known:
            raise TargetError(f"--extra {extra!r}: pyproject.toml has no such extra; one of {', '.join(sorted(known))}")
        built_for = re.search(r"-cu(\d+)$", extra)
        if built_for and int(built_for.group(1)) != cuda:
            node = f"CUDA {cuda}" if cuda else "a CPU node (--cuda none)"
            raise TargetError(f"--extra {extra!r} is built for CUDA {built_for.group(1)} and the target is {node}: "
                              f"use --cuda {built_for.group(1)} or the extra for the node's CUDA "
                              f"({default_extra(cuda)})")
