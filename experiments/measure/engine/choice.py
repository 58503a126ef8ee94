"""Which engine measures a trial: `experiment.load_engine` against what the trial's client and the node allow."""

from __future__ import annotations

from hydra.utils import get_class

from experiments.config.choices import LoadEngine
from experiments.measure.engine.build import EngineStatus
from serving.clients.base import ClientSpec
from serving.protocols import parse_protocol


class EngineRefused(RuntimeError):
    """`experiment.load_engine=compiled` and the compiled engine cannot measure this trial."""


def compiled_unsupported(spec: ClientSpec, protocol: str, status: EngineStatus) -> str | None:
    """Why the compiled engine cannot send this trial's requests on this node; None when it can."""
    if not status.available:
        return status.problem
    reason = get_class(spec.target).wire_unsupported(spec)
    if reason:
        return reason
    if parse_protocol(protocol)[0] == "grpc" and not status.http2:
        return ("gRPC needs libnghttp2.so.14 on the client's node (Debian/Ubuntu: libnghttp2-14, which curl "
                "installs); it is missing here")
    return None


def choose_engine(requested: str, spec: ClientSpec, protocol: str, status: EngineStatus) -> tuple[LoadEngine, str]:
    """The engine, and why it is not the one asked for ('' when it is). `compiled` that cannot: EngineRefused."""
    requested = LoadEngine(requested)
    if requested is LoadEngine.PYTHON:
        return LoadEngine.PYTHON, ""
    reason = compiled_unsupported(spec, protocol, status)
    if reason is None:
        return LoadEngine.COMPILED, ""
    if requested is LoadEngine.COMPILED:
        raise EngineRefused(f"experiment.load_engine=compiled cannot measure {protocol}: {reason}. Use "
                            "experiment.load_engine=auto (python where compiled cannot) or python")
    return LoadEngine.PYTHON, f"python: {reason}"
