"""Ray Serve's direct ingress (alpha in Ray 2.60) as the `pytorch_direct` variant: turned on for the cluster when a
backend needs it, refused up front when the cluster switch is set off; with it, trials over HTTP and gRPC reach the
replica's own ports, not the proxy's."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate


def test_a_direct_ingress_backend_needs_the_cluster_switch() -> None:
    cfg = load_config(["experiment.backends=[pytorch_direct]", "cluster.serve_direct_ingress=false"])
    with pytest.raises(ConfigError, match=r"backends\.pytorch_direct\.direct_ingress=True .*"
                                          r"cluster\.serve_direct_ingress=true"):
        validate(cfg)
    validate(load_config(["experiment.backends=[pytorch_direct]", "cluster.serve_direct_ingress=true"]))
    settled = load_config(["experiment.backends=[pytorch_direct]"])  # null: on, because a backend needs it
    validate(settled)
    assert settled.cluster.serve_direct_ingress is True


def test_the_switch_reaches_the_sweep_jobs_environment_through_ray_serves_package() -> None:
    from experiments.cluster.connection import job_runtime_env

    assert job_runtime_env(load_config(["cluster.serve_direct_ingress=false"]).cluster) is None
    assert job_runtime_env(load_config(["cluster.serve_direct_ingress=true"]).cluster) == {"env_vars": {
        "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1"}}


@pytest.mark.slow
def test_direct_ingress_trials_reach_the_replica_port_over_http_and_grpc() -> None:
    import ray

    from benchmarks.common import local_tier
    from experiments.measure.client_actor import ClientPool
    from experiments.plan import Trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    cfg = load_config(["model=tiny", "experiment.backends=[pytorch,pytorch_direct]", "experiment.batch_sizes=[1]",
                          "cluster.serve_direct_ingress=true", "experiment.window_s=0.5", "experiment.warmup_s=0.2",
                          "experiment.stability.windows=1"])
    validate(cfg)
    with local_tier(cfg) as (node, options):
        clients = ClientPool(cfg.experiment, options, 120).start()
        backends = {name: build_backend(cfg, name, node, options) for name in ("pytorch", "pytorch_direct")}
        try:
            handles = {name: backend.start() for name, backend in backends.items()}
            proxy, direct = handles["pytorch"], handles["pytorch_direct"]
            assert (proxy.params["server_ingress"], direct.params["server_ingress"]) == ("proxy", "direct")
            for protocol in ("http", "grpc"):
                address = {h: urlsplit(f"//{handles[h].urls[protocol].split('://')[-1]}") for h in handles}
                assert address["pytorch_direct"].port != address["pytorch"].port, protocol
                assert address["pytorch_direct"].hostname == "127.0.0.1"
                trial = Trial("local", "tiny", "pytorch", "pytorch_direct", protocol, "tensor", 1, 1)
                record = run_trial(cfg, trial, backends["pytorch_direct"], direct, node, clients)
                assert record.status == "ok", record.reason
                assert record.metrics["server_batch_avg"] == pytest.approx(1.0)
            # HTTP never measures from a process gRPC ran in (grpc's threads outlive its channel)
            pids = {p: ray.get(clients.ensure(1, p)[0].__ray_call__.remote(lambda _: os.getpid()))
                    for p in ("http", "grpc", "http_shm")}
            assert pids["http"] != pids["grpc"] and pids["http"] == pids["http_shm"]
        finally:
            for backend in backends.values():
                backend.stop()
            clients.close()
