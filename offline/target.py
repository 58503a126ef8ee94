"""The node a wheelhouse is for: its Python, platform tag and CUDA major, validated once, and what follows from
them (pip's cross-platform options, the environment requirement markers are evaluated in, the torch that fits)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")
CUDA_MAJORS = (12, 13)
# PyPI's torch builds by CUDA major, from their wheels' metadata (README, GPU nodes): 2.6-2.10 for CUDA 12
# (2.8-2.10: 12.8), 2.11 and later for CUDA 13. A node that keeps its own torch (--keep-installed) needs none.
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
        if self.platform not in PLATFORMS:
            raise TargetError(f"--platform {self.platform!r}: one of {', '.join(PLATFORMS)} (glibc 2.28 or newer: "
                              "what onnxruntime-gpu and Ray's wheels need)")
        if self.cuda is not None and self.cuda not in CUDA_MAJORS:
            raise TargetError(f"--cuda {self.cuda!r}: the CUDA major of the node's driver, one of "
                              f"{', '.join(map(str, CUDA_MAJORS))} (`nvidia-smi` shows it; `none` for a CPU node)")

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def machine(self) -> str:
        return self.platform.rsplit("_", 1)[-1] if not self.platform.endswith("x86_64") else "x86_64"

    @property
    def slug(self) -> str:
        """A folder name that says what the wheelhouse is for, e.g. cp312-cu13-x86_64."""
        return f"{self.abi}-{f'cu{self.cuda}' if self.cuda else 'cpu'}-{self.machine}"

    def pip_options(self) -> list[str]:
        """pip's options that make it resolve and download for this node instead of the running interpreter."""
        return ["--only-binary", ":all:", "--platform", self.platform, "--python-version", self.python,
                "--implementation", "cp", "--abi", self.abi]

    def marker_environment(self, host: dict[str, str]) -> dict[str, str]:
        """PEP 508 marker values of the node: the host's, with the node's Python and machine."""
        return {**host, "python_version": self.python, "python_full_version": f"{self.python}.0",
                "implementation_version": f"{self.python}.0", "platform_machine": self.machine,
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}

    def torch_requirements(self) -> tuple[str, ...]:
        """The torch and torchvision ranges whose PyPI builds run on this node's CUDA (none for CPU nodes)."""
        return TORCH_FOR_CUDA.get(self.cuda, ()) if self.cuda else ()


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
