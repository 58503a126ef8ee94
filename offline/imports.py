"""`python -m offline.imports`: import every module of tierbench on this node and list what fails, so an offline
install that lacks a package shows it at once, not in the middle of a sweep (benchmarks/gpu_first_light.sh runs
it right after the install)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

PACKAGES = ("runners", "experiments", "serving", "offline", "hydra_plugins")


def import_all(packages: tuple[str, ...] = PACKAGES) -> tuple[int, list[tuple[str, str]]]:
    """How many modules were imported, and (module, error) for each that failed."""
    count, failed = 0, []
    for package in packages:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}."):
            count += 1
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - every failure is the report
                failed.append((info.name, f"{type(exc).__name__}: {exc}"))
    return count, failed


if __name__ == "__main__":
    imported, failures = import_all()
    for name, error in failures:
        print(f"FAILED {name}: {error}")
    print(f"{imported - len(failures)} of {imported} modules import on Python {sys.version.split()[0]}")
    sys.exit(1 if failures else 0)
