"""One `tritonserver` process: `serving.tritonserver.server`, which every backend running a Triton shares; the image
backend's modules and tests name it here."""

from serving.tritonserver.server import (
    LOCK_EXCEPTION_DOCS,
    SHM_PREFIX,
    TritonEndpoints,
    TritonServer,
    abort_cause,
    remove_orphan_regions,
)

__all__ = ["LOCK_EXCEPTION_DOCS", "SHM_PREFIX", "TritonEndpoints", "TritonServer", "abort_cause",
           "remove_orphan_regions"]
