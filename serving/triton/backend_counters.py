"""Where the bundled Triton's Python model spends Triton's infer time, from the model's own counters.

Triton counts the Python backend's whole execute as infer time. tierbench's model (serving/triton/python_backend/
model.py, which cannot import this module: Triton's stub ignores PYTHONPATH) sums, per request as Triton counts its
durations, the time it spends gathering a pass's inputs into one batch, in the ONNX Runtime run and building the
responses, and each stub process writes its running totals at most every 50 ms to `<pid>.json` in the folder the
environment variable `ENV` names (replaced whole, so a reader sees one version or the next). The server's host reads
them beside Triton's /metrics; what is left of Triton's infer time is the server's exchange with the stub process.

Triton's own custom metrics (`pb_utils.MetricFamily`) were the first way: reloading a model that had created them
corrupted the bundled server's heap (2.51), and a settings search reloads the model for every candidate.
"""

from __future__ import annotations

import json
from pathlib import Path

ENV = "TIERBENCH_BACKEND_COUNTERS"
REQUESTS = "tierbench_backend_requests"
BREAKDOWN = {  # trial metric: the counter (microseconds, summed over requests)
    "server_backend_input_ms": "tierbench_backend_input_us",
    "server_backend_run_ms": "tierbench_backend_run_us",
    "server_backend_output_ms": "tierbench_backend_output_us",
}


def read(folder: Path, model: str) -> dict[str, float]:
    """The model's totals over every stub process that wrote them (an instance reloaded away keeps its file, so the
    totals only grow); empty where none did."""
    totals = dict.fromkeys((REQUESTS, *BREAKDOWN.values()), 0.0)
    found = False
    for path in folder.glob("*.json"):
        try:
            written = json.loads(path.read_text())
        except (OSError, ValueError):  # a file half-written by hand, or gone with its server: not ours to count
            continue
        if written.get("model") != model:
            continue
        found = True
        for name in totals:
            totals[name] += float(written.get(name, 0.0))
    return totals if found else {}


def breakdown(before: dict[str, float], after: dict[str, float], infer_ms: float) -> dict[str, float]:
    """The model's own time per request between two snapshots, and the rest of Triton's infer time per request over
    them (`infer_ms`, its `server_compute_infer_ms`): `server_backend_stub_ms`, the server handing requests to the
    stub process and taking its responses back. Empty without the model's counters (NVIDIA's native backends) or a
    request between the snapshots."""
    executed = after.get(REQUESTS, 0.0) - before.get(REQUESTS, 0.0)
    if executed <= 0:
        return {}
    out = {name: (after[c] - before.get(c, 0.0)) / executed / 1000.0 for name, c in BREAKDOWN.items()}
    out["server_backend_stub_ms"] = max(0.0, infer_ms - sum(out.values()))
    return out
