"""Each trial against its runtime's ceiling (experiments/measure/efficiency.py): the shares, and one verdict per
breakdown that calls for it, backed by the breakdown's own numbers; the search stopping at a busy GPU; the
direct-ingress switch settled from the backends."""

from __future__ import annotations

import pytest

from experiments.config.choices import SearchStrategy
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from experiments.measure.efficiency import Bottleneck, client_side_verdict, efficiency_metrics, verdict
from experiments.run.settings_search import SearchSpace, search_settings
from serving.inprocess import RESIDENT, ROUND_TRIP, InProcessPoint, RuntimeTiming
from serving.runtime import Engine, Runtime

GPU_TIMING = RuntimeTiming(Runtime(Engine.ONNXRUNTIME, "cuda", provider="CUDAExecutionProvider"), [
    InProcessPoint(1, ROUND_TRIP, 1.0, 1.0, 1000.0, 50), InProcessPoint(8, ROUND_TRIP, 2.0, 2.0, 4000.0, 50),
    InProcessPoint(16, ROUND_TRIP, 3.2, 3.2, 5000.0, 50), InProcessPoint(1, RESIDENT, 0.5, 0.5, 2000.0, 50),
    InProcessPoint(16, RESIDENT, 1.6, 1.6, 10000.0, 50)])


def test_shares_are_served_over_the_ceiling_at_the_batch_the_server_computed() -> None:
    served = {"throughput_img_s": 2000.0, "latency_p50_ms": 4.0}
    out = efficiency_metrics(served, GPU_TIMING, 8)
    assert out["ceiling_batch"] == 8 and out["ceiling_img_s"] == 4000.0 and out["ceiling_share"] == 0.5
    assert out["ceiling_best_img_s"] == 5000.0 and out["ceiling_best_batch"] == 16
    assert out["ceiling_share_best"] == pytest.approx(0.4)
    assert out["ceiling_resident_best_img_s"] == 10000.0 and out["ceiling_share_resident"] == pytest.approx(0.2)
    assert out["ceiling_p50_ms"] == 2.0 and out["served_p50_over_inprocess"] == 2.0
    assert out["ceiling_b1_p50_ms"] == 1.0
    # A dynamic batcher merged batch-1 requests into 12-image passes: the ceiling is read at 12 (4,500 img/s).
    merged = efficiency_metrics({**served, "server_batch_avg": 12.0}, GPU_TIMING, 1)
    assert merged["ceiling_batch"] == 12.0 and merged["ceiling_img_s"] == pytest.approx(4500.0)
    assert efficiency_metrics({"throughput_img_s": 0.0}, GPU_TIMING, 1) == {}


BASE = {"throughput_img_s": 1000.0, "latency_p50_ms": 10.0, "latency_mean_ms": 10.0, "client_cpu_util_max": 0.3,
        "client_cpu_us_per_request": 200.0, "requests_s": 100.0, "ceiling_batch": 1.0, "ceiling_share": 0.3}
PARAMS = {"concurrency": 8, "batch_size": 1, "load_mode": "closed", "client_placement": "colocated"}

# One breakdown per verdict, with the number its evidence must quote.
CASES = {
    Bottleneck.CLIENT: ({"client_cpu_util_max": 0.97}, {}, True, "97 %"),
    Bottleneck.COMPUTE: ({"gpu_util_pct": 91.0, "server_request_ms": 9.0, "server_queue_ms": 6.0}, {}, True, "91 %"),
    Bottleneck.CPU: ({"ceiling_share": 0.82, "server_request_ms": 9.5}, {}, False, "82 %"),
    Bottleneck.QUEUE: ({"gpu_util_pct": 30.0, "server_request_ms": 9.0, "server_queue_ms": 7.0}, {}, True, "7.00 ms"),
    Bottleneck.PROXY: ({"gpu_util_pct": 10.0, "server_replica_ms": 2.0}, {"server_ingress": "proxy"}, True,
                       "8.00 ms"),
    Bottleneck.TRANSPORT: ({"gpu_util_pct": 20.0, "server_request_ms": 4.0, "server_queue_ms": 0.1}, {}, True,
                           "6.00 ms"),
    Bottleneck.LOAD: ({"gpu_util_pct": 35.0, "server_request_ms": 9.0, "server_queue_ms": 0.2}, {}, True, "35 %"),
}


@pytest.mark.parametrize("expected", list(CASES), ids=str)
def test_each_breakdown_gets_its_verdict_with_its_numbers(expected: Bottleneck) -> None:
    metrics, params, on_gpu, quoted = CASES[expected]
    judged = verdict({**BASE, **metrics}, {**PARAMS, **params}, on_gpu, client_cpu_limit=0.8, node_cpus=16)
    assert judged.bottleneck is expected
    assert quoted in judged.evidence
    tags = judged.tags()
    assert tags["bottleneck"] == str(expected) and tags["bottleneck_fix"] == expected.fix


def test_time_behind_haproxy_is_the_proxys_and_names_haproxy() -> None:
    """HAProxy in place of Serve's proxy is still a hop outside the replica: its time is the proxy's verdict."""
    metrics, params, on_gpu, quoted = CASES[Bottleneck.PROXY]
    judged = verdict({**BASE, **metrics}, {**PARAMS, "server_ingress": "haproxy"}, on_gpu, 0.8, 16)
    assert judged.bottleneck is Bottleneck.PROXY and "through Serve's HAProxy" in judged.evidence
    assert quoted in judged.evidence and "pytorch_direct" in judged.tags()["bottleneck_fix"]
    direct = verdict({**BASE, **metrics}, {**PARAMS, "server_ingress": "direct"}, on_gpu, 0.8, 16)
    assert direct.bottleneck is Bottleneck.TRANSPORT


def test_an_open_loop_client_that_fell_behind_its_schedule_is_the_limit_whatever_the_server_shows() -> None:
    """Its CPU reads low (a starved client is not running), the server's queue dominates: the client still decides."""
    metrics = {**BASE, "client_cpu_util_max": 0.05, "server_request_ms": 9.0, "server_queue_ms": 7.0,
               "client_behind": 1.0, "late_fraction": 0.96, "client_loop_lag_p99_ms_max": 779.0}
    judged = verdict(metrics, {**PARAMS, "load_mode": "poisson"}, True, client_cpu_limit=0.8, node_cpus=2)
    assert judged.bottleneck is Bottleneck.CLIENT
    assert judged.evidence == ("96 % of the arrivals left more than 5 ms late, and the client's own timer ran p99 "
                               "779 ms late: the client fell behind its schedule")
    assert "experiment.load_engine=auto" in judged.tags()["bottleneck_fix"]
    kept = verdict({**metrics, "client_behind": 0.0}, {**PARAMS, "load_mode": "poisson"}, True, 0.8, 2)
    assert kept.bottleneck is Bottleneck.QUEUE


def test_a_serve_replica_that_says_how_long_requests_waited_for_their_pass_is_queue_bound() -> None:
    """Ray Serve's replica reports its queue in its Server-Timing: 7 of its 8 ms waiting for the inference thread
    outweigh the 1 ms through the proxy."""
    metrics = {**BASE, "gpu_util_pct": 25.0, "server_replica_ms": 9.0, "server_queue_ms": 7.0}
    judged = verdict(metrics, {**PARAMS, "server_ingress": "proxy"}, True, client_cpu_limit=0.8, node_cpus=16)
    assert judged.bottleneck is Bottleneck.QUEUE and "7.00 ms of a 10.00 ms" in judged.evidence
    assert "num_replicas" in judged.tags()["bottleneck_fix"]
    merged = verdict({**metrics, "server_batch_avg": 1.0}, {**PARAMS, "server_ingress": "proxy"}, True,
                     client_cpu_limit=0.8, node_cpus=16)
    assert merged.evidence.endswith("waited in the server's queue (its passes ran 1.0 images each)"), \
        "a batcher that merged nothing shows in the evidence"
    assert "batcher: when_free or a wait about a forward pass long" in merged.tags()["bottleneck_fix"]


def test_a_cpu_node_shared_with_its_clients_is_cpu_bound_and_says_how_many_cores_they_took() -> None:
    """Two cores, the clients on the same node using 0.9 of them: the server could not have reached its
    in-process throughput, whatever its settings."""
    metrics = {**BASE, "ceiling_share": 0.4, "server_request_ms": 9.0, "client_cpu_us_per_request": 900.0,
               "requests_s": 1000.0}
    judged = verdict(metrics, PARAMS, on_gpu=False, client_cpu_limit=0.8, node_cpus=2)
    assert judged.bottleneck is Bottleneck.CPU
    assert "0.90 of its 2 cores" in judged.evidence
    separate = verdict(metrics, {**PARAMS, "client_placement": "separate"}, False, 0.8, 2)
    assert separate.bottleneck is not Bottleneck.CPU


def test_a_full_node_cpu_is_the_limit_on_a_gpu_node_too() -> None:
    """The GPU idles while the node's cores are busy (a Python server, its proxy, the clients): cpu, not load."""
    metrics = {**BASE, "gpu_util_pct": 12.0, "server_replica_ms": 9.0, "node_cpu_util_pct": 93.0,
               "node_cpu_cores_busy": 14.9}
    judged = verdict(metrics, PARAMS, on_gpu=True, client_cpu_limit=0.8, node_cpus=16)
    assert judged.bottleneck is Bottleneck.CPU
    assert "93 % busy" in judged.evidence and "14.9 of 16 cores" in judged.evidence
    assert "GPU only 12 %" in judged.evidence
    calm = verdict({**metrics, "node_cpu_util_pct": 40.0, "node_cpu_cores_busy": 6.4}, PARAMS, True, 0.8, 16)
    assert calm.bottleneck is Bottleneck.LOAD
    assert verdict({**metrics, "gpu_util_pct": 90.0}, PARAMS, True, 0.8, 16).bottleneck is Bottleneck.COMPUTE


def test_one_saturated_server_thread_is_the_limit_whatever_the_nodes_other_cores_do() -> None:
    """A Python replica's event loop at a full core on a 16-core GPU node: the node reads 8 % busy, the GPU 9 %; the
    busiest server thread says what holds it back."""
    metrics = {**BASE, "gpu_util_pct": 9.0, "server_replica_ms": 30.0, "latency_mean_ms": 36.0,
               "node_cpu_util_pct": 8.0, "server_thread_cpu_max": 0.97, "server_cpu_cores": 1.3}
    judged = verdict(metrics, {**PARAMS, "server_ingress": "direct"}, on_gpu=True, client_cpu_limit=0.8,
                     node_cpus=16)
    assert judged.bottleneck is Bottleneck.CPU
    assert "one thread of the server used 97 % of a core" in judged.evidence and "1.3 cores" in judged.evidence
    assert "GPU busy only 9 %" in judged.evidence
    named = verdict(metrics, {**PARAMS, "server_ingress": "direct",
                              "server_busiest_thread": "thread 'triton_python_b' of triton_python_backend_stub "
                                                       "(pid 412, tid 418)"}, True, 0.8, 16)
    assert "one thread of the server (thread 'triton_python_b' of triton_python_backend_stub (pid 412, tid 418)) " \
           "used 97 % of a core" in named.evidence
    idle = verdict({**metrics, "server_thread_cpu_max": 0.4}, {**PARAMS, "server_ingress": "direct"}, True, 0.8, 16)
    assert idle.bottleneck is Bottleneck.LOAD


def test_the_quick_climb_stops_where_the_gpu_is_busy() -> None:
    space = SearchSpace.of({"instance_count": [1, 2, 4, 8]})
    measured = []

    def objective(values: dict) -> float:
        measured.append(values["instance_count"])
        return 1000.0 * values["instance_count"]

    outcome = search_settings(space, objective, SearchStrategy.QUICK, space.point_of({"instance_count": 1}),
                              saturated=lambda values: values["instance_count"] >= 2)
    assert measured == [1, 2]  # 2 kept the GPU busy: 4 and 8 are not worth their probes
    assert space.values(outcome.best) == {"instance_count": 2}
    assert space.values(outcome.stopped_at_limit) == {"instance_count": 2}
    unbounded = search_settings(space, objective, SearchStrategy.QUICK, space.point_of({"instance_count": 1}))
    assert space.values(unbounded.best) == {"instance_count": 8} and unbounded.stopped_at_limit is None


def test_direct_ingress_turns_on_when_a_backend_needs_it() -> None:
    cfg = load_config(["experiment=first_light"])
    assert cfg.cluster.serve_direct_ingress is None
    validate(cfg)
    assert cfg.cluster.serve_direct_ingress is True
    plain = load_config([])
    validate(plain)
    assert plain.cluster.serve_direct_ingress is False
    refused = load_config(["experiment=first_light", "cluster.serve_direct_ingress=false"])
    with pytest.raises(ConfigError, match="backends.pytorch_direct.direct_ingress=True .* set "
                                          "cluster.serve_direct_ingress=true"):
        validate(refused)


def test_an_endpoint_without_its_servers_metrics_gets_the_verdicts_the_client_can_decide() -> None:
    """No runtime ceiling and no server breakdown: a busy client, a node whose CPU was full and a network round trip
    that takes most of a request are still named; nothing else is guessed."""
    params = {"load_mode": "closed", "concurrency": 4, "batch_size": 1}
    client = client_side_verdict({"client_cpu_util_max": 0.95, "latency_p50_ms": 20.0}, params, 0.8)
    assert client is not None and client.bottleneck is Bottleneck.CLIENT
    far = client_side_verdict({"latency_mean_ms": 20.0, "endpoint_rtt_p50_ms": 12.0}, params, 0.8)
    assert far is not None and far.bottleneck is Bottleneck.TRANSPORT and "12.00 ms" in far.evidence
    cpu = client_side_verdict({"latency_mean_ms": 20.0, "node_cpu_util_pct": 97.0}, params, 0.8)
    assert cpu is not None and cpu.bottleneck is Bottleneck.CPU
    assert client_side_verdict({"latency_mean_ms": 20.0, "endpoint_rtt_p50_ms": 0.3}, params, 0.8) is None
    # with the server's own time per request (its metrics URL), the breakdown's verdicts too
    queued = client_side_verdict({"latency_mean_ms": 20.0, "endpoint_rtt_p50_ms": 0.3, "server_request_ms": 19.0,
                                  "server_queue_ms": 15.0}, params, 0.8)
    assert queued is not None and queued.bottleneck is Bottleneck.QUEUE
