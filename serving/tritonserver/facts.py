"""Which Triton a node can run (NVIDIA's own on PATH, or the one bundled in nvidia-pytriton), probed on the node
itself (`serving.probe.describe_node`): every backend running a Triton decides by it (`NodeInfo.facts`), probed once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class TritonFacts:
    """Which Triton the node can run. The defaults mean: not probed (no native server; the bundled one trusted)."""

    KEY: ClassVar[str] = "triton"

    native: bool = False  # a `tritonserver` on PATH (NVIDIA's container)
    backends: tuple[str, ...] = ()  # the native server's backends
    bundled: str = ""  # the server bundled in nvidia-pytriton, when it can run here
    bundled_problem: str | None = None  # why it cannot (None: it can, or not probed)

    @classmethod
    def probe(cls) -> TritonFacts:
        from serving.tritonserver.installation import bundled_description, bundled_problem, native_backends

        native = native_backends()
        bundled = bundled_problem()
        return cls(native=native is not None, backends=native or (),
                   bundled="" if bundled else bundled_description(), bundled_problem=bundled)
