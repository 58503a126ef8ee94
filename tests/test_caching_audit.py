"""The caching audit (experiment.inputs.audit): each point measured with distinct inputs and with one input
repeated. A stand-in that caches answers is flagged; the real service it wraps is not. Both are the project's OIP
service (the tiny model on the CPU, made to take 30 ms an inference, so that there is something a cache saves) in a
process of its own, measured as an endpoint on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.report.audit_section import audit_frame
from experiments.report.data import load_sweep
from tests.endpoint_helpers import sweep_args
from tests.helpers import store_uri
from tests.oip_server_process import OipServerProcess
from tests.processes import owned_environment
from tests.sweep_process import run_sweep_command


def _audit(tmp_path: Path, cache: bool):
    name = "cached" if cache else "real"
    folder = tmp_path / name
    with owned_environment(), OipServerProcess(folder / "server", cache=cache, compute_ms=30) as server:
        args = sweep_args(folder, f"audit-{name}", server.url, "experiment.inputs.audit=true",
                          "experiment.input_formats=[tensor]", "experiment.concurrency=[1]",
                          "experiment.window_s=1.0", "report=false")
        proc, _ = run_sweep_command(args, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    data = load_sweep(store_uri(folder), "tierbench", f"audit-{name}")
    return data, audit_frame(data)


@pytest.mark.slow
def test_the_audit_flags_a_server_that_caches_answers_and_not_the_service_itself(
        tmp_path: Path, no_leftover_processes: None) -> None:
    data, cached = _audit(tmp_path, cache=True)
    # the twin is measured beside its point, never among the trials an answer may come from
    assert len(cached) == 1 and len(data.repeated) == 1 and not data.trials["repeated_input"].any()
    twin, point = data.repeated.iloc[0], data.ok.iloc[0]
    assert twin["distinct_requests"] == 1 and point["distinct_requests"] > 100
    assert point["input_repeats"] < 1 < twin["input_repeats"]  # no bytes sent twice, against one request over and over
    assert bool(cached["flagged"].iloc[0]), str(cached.iloc[0].to_dict())

    _, real = _audit(tmp_path, cache=False)
    assert len(real) == 1 and not bool(real["flagged"].iloc[0]), real.to_dict("records")
    print(f"\nrepeated input faster by: cached {cached['speedup'].iloc[0]:+.1%}, real {real['speedup'].iloc[0]:+.1%}")
