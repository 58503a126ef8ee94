"""What a node offers the FastAPI service: FastAPI and uvicorn (with the event loop and HTTP parser it would use)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from typing import ClassVar


@dataclass(frozen=True)
class FastApiFacts:
    """The defaults mean: not probed."""

    KEY: ClassVar[str] = "fastapi"

    fastapi: str = ""
    uvicorn: str = ""
    loop: str = ""  # uvloop when installed (uvicorn's `auto`), else asyncio
    http: str = ""  # httptools when installed, else h11
    problem: str | None = None  # what is missing

    @classmethod
    def probe(cls) -> FastApiFacts:
        versions = {}
        for package in ("fastapi", "uvicorn"):
            try:
                versions[package] = metadata.version(package)
            except metadata.PackageNotFoundError:
                return cls(problem=f"{package} is not installed (pip install tierbench's dependencies)")
        return cls(versions["fastapi"], versions["uvicorn"], "uvloop" if find_spec("uvloop") else "asyncio",
                   "httptools" if find_spec("httptools") else "h11")
