"""A card shared by servers at once (`gpu.gpu_share` 1/N without a MIG profile): what is refused before anything
starts, the node that is the card being those tiers too, one tier job per node at a time, the neighbours' figures,
and a real sweep on this machine shared by two servers, priced as halves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from experiments.cluster.tiers import (
    NODE_LOCK_RESOURCE,
    node_declaration,
    shared_tiers_of,
    tier_resource,
    tiers_for_gpu,
)
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.shares import share_params, tenants
from experiments.config.validation import validate
from experiments.measure.metrics import tenancy_metrics
from experiments.measure.samples import WindowSamples
from experiments.results.layout import TierFolder
from tests.helpers import TINY_SWEEP, store_overrides
from tests.sweep_process import run_sweep_command


def test_a_shared_card_runs_one_server_per_share_and_a_slice_or_card_one() -> None:
    shared = load_config(["gpu=local_shared2"]).gpu
    assert tenants(shared) == 2 and share_params(shared)["tenants"] == 2
    assert tenants(load_config(["gpu=h100_sxm_shared2"]).gpu) == 2
    assert tenants(load_config(["gpu=h100_sxm_3g40gb"]).gpu) == 1, "a MIG slice's compute is its own"
    assert tenants(load_config(["gpu=local"]).gpu) == 1 and share_params(load_config(["gpu=local"]).gpu) == {}
    assert tenants(load_config(["gpu=local_shared2", "gpu.gpu_share=0.25"]).gpu) == 4


@pytest.mark.parametrize(("overrides", "message"), [
    (["gpu=local_shared2", "gpu.gpu_share=0.4"], "gpu.gpu_share=0.4 is not allowed: a card shared by N servers"),
    (["gpu=local_shared2", "gpu.gpu_share=0.1"], "gpu.gpu_share=0.1 is not allowed: a card shared by N servers"),
    (["gpu=local_shared2", "experiment.backends=[endpoint]", "backends.endpoint.url=http://127.0.0.1:9"],
     "experiment.backends=['endpoint'] is not allowed: tier local_shared2 is a card shared by 2 servers"),
    (["gpu=h100_sxm_shared2", "experiment.backends=[triton_onnx]", "backends.triton_onnx.num_gpus=0.75"],
     "backends.triton_onnx.num_gpus=0.75 is not allowed: each of the 2 servers sharing the card"),
    (["gpu=h100_sxm_shared2", "gpu.gpu_share=0.25", "experiment.backends=[pytorch]"],
     "backends.pytorch.replica_num_gpus=0.5 is not allowed: each of the 4 servers sharing the card"),
])
def test_what_cannot_share_a_card_is_refused_naming_the_key_and_the_fix(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(load_config(overrides))
    assert message in str(caught.value)
    assert "e.g." in str(caught.value) or "1/N" in str(caught.value) or "drop it" in str(caught.value)


def test_a_card_shared_by_four_fits_when_each_server_asks_a_quarter() -> None:
    validate(load_config(["gpu=h100_sxm_shared2", "gpu.gpu_share=0.25", "experiment.backends=[triton_onnx]",
                          "backends.triton_onnx.num_gpus=0.25"]))


def test_the_node_that_is_a_card_is_the_tiers_that_share_it_and_its_lease_takes_it_whole() -> None:
    """An H100 SXM is tier h100_sxm (its identity, alone), and a node of it declares h100_sxm_shared2 too, with the
    one lock every tier job's lease takes: the card and its shared tier are measured one after the other."""
    assert tiers_for_gpu(["NVIDIA H100 80GB HBM3"], [81559]) == ["h100_sxm"]
    assert shared_tiers_of(["h100_sxm", "local"]) == ["h100_sxm_shared2", "local_shared2"]
    declared = node_declaration(["h100_sxm"])
    assert declared == {tier_resource("h100_sxm"): 1.0, tier_resource("h100_sxm_shared2"): 1.0, NODE_LOCK_RESOURCE: 1.0}
    assert NODE_LOCK_RESOURCE not in node_declaration([], client_pool=True), "a load generator holds no tier"


def _samples(completed: int, latency_ms: float) -> WindowSamples:
    times = np.linspace(100.0, 109.0, completed)
    return WindowSamples(100.0, 110.0, 2, intended_s=times, send_s=times, done_s=times + latency_ms / 1e3,
                         server_ms=np.full(completed, np.nan), actor=np.zeros(completed), completed=completed,
                         sent=completed)


def test_the_neighbours_figures_sit_beside_the_trials_own() -> None:
    """Over 10 s windows of 2-image requests: the trial's server answered 100 (20 img/s), its neighbours 50 and 80."""
    metrics = tenancy_metrics(_samples(100, 5.0), [_samples(50, 10.0), _samples(80, 20.0)])
    assert metrics["tenants_measured"] == 3
    assert metrics["card_throughput_img_s"] == pytest.approx(46.0)
    assert metrics["neighbour_throughput_img_s"] == pytest.approx(13.0)
    assert metrics["tenant_fairness"] == pytest.approx(0.5)
    assert metrics["neighbour_latency_p50_ms"] == pytest.approx(20.0)
    assert tenancy_metrics(_samples(100, 5.0), []) == {}, "a card of its own: nothing beside"


@pytest.mark.slow
def test_this_machine_shared_by_two_servers_is_measured_with_both_loaded_and_priced_as_halves(
        tmp_path: Path, no_leftover_processes: None) -> None:
    """Two Triton servers on this machine, each under the trial's closed loop at once: the trial is the first
    one's, its neighbour's throughput beside it, the card's the two together, at half the machine's price; both
    servers' files are kept and both are stopped."""
    proc, _ = run_sweep_command([*TINY_SWEEP, "gpu=local_shared2", "experiment.backends=[triton_onnx]",
                                 *store_overrides(tmp_path, "shared", premigrated=True)], timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    folder = TierFolder.of(tmp_path / "runs", "shared", "local_shared2").path
    (record,) = [json.loads(p.read_text()) for p in folder.glob("trials/*/record.json")]
    metrics, params = record["metrics"], record["params"]
    assert record["status"] == "ok", record["reason"]
    assert (params["tenants"], params["gpu_share"], params["share_of"]) == (2, 0.5, "local")
    assert params["price_per_hour_usd"] == pytest.approx(0.08925 / 2)
    assert metrics["tenants_measured"] == 2 and metrics["neighbour_throughput_img_s"] > 0
    assert metrics["card_throughput_img_s"] == pytest.approx(
        metrics["throughput_img_s"] + metrics["neighbour_throughput_img_s"])
    assert 0 < metrics["tenant_fairness"] <= 1 and metrics["neighbour_latency_p50_ms"] > 0
    served = {p.name for p in (folder / "servers" / "triton_onnx").iterdir()}
    assert {"config.pbtxt", "triton_onnx-tenant1.config.pbtxt", "tritonserver.log",
            "triton_onnx-tenant1.tritonserver.log"} <= served, served


def _held(log: str) -> tuple[str, str]:
    """When a tier job held its node and released it, from its sweep.log (timestamps sort as text)."""
    stamp = re.compile(r"^\[([\d\- :,]+)\]")
    held = next(stamp.match(line)[1] for line in log.splitlines() if "holding node" in line)
    released = next(stamp.match(line)[1] for line in log.splitlines() if "released node" in line)
    return held, released


@pytest.mark.slow
def test_a_card_and_its_shared_tier_take_turns_on_one_emulated_node_and_the_report_compares_them(
        tmp_path: Path, no_leftover_processes: None) -> None:
    """One emulated H100 SXM node is both tiers: the two tier jobs hold it one after the other, never at once, and
    the report sets the shared card beside the whole card."""
    proc, _ = run_sweep_command([*TINY_SWEEP, "cluster=emulated", "cluster.nodes=[{tier: h100_sxm, num_cpus: 2}]",
                                 "gpu=h100_sxm,h100_sxm_shared2", "experiment.backends=[triton_onnx]",
                                 *store_overrides(tmp_path, "turns", premigrated=True), "report=true", "-m"],
                                timeout=540)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    spans = sorted(_held((TierFolder.of(tmp_path / "runs", "turns", tier).path / "sweep.log").read_text())
                   for tier in ("h100_sxm", "h100_sxm_shared2"))
    assert spans[0][1] <= spans[1][0], f"the two tier jobs held the node at once: {spans}"
    (report,) = (tmp_path / "runs").rglob("report.md")
    text = report.read_text()
    assert "# Slices and shared cards" in text and "h100_sxm_shared2 (emulated) (2 servers at once, 1/2)" in text
