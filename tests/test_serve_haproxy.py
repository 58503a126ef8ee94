"""Ray Serve's HAProxy ingress (Ray's high-throughput mode) as the `pytorch_haproxy` variants: turned on for the
cluster when a backend needs it, refused up front beside a backend measured through Serve's own proxy (HAProxy takes
its ports) or with the switch set off; with it, trials over HTTP and gRPC go through HAProxy on the proxy's ports to
the replicas, and HAProxy stops with the sweep's Ray."""

from __future__ import annotations

import subprocess

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.ray_serve.cluster import HAPROXY_LARGE_MESSAGES


def test_a_haproxy_backend_turns_the_switch_on_and_refuses_the_proxy_beside_it() -> None:
    settled = load_config(["experiment.backends=[pytorch_haproxy,pytorch_direct]"])
    validate(settled)  # direct ingress comes on with HAProxy: the replica's own port still answers
    assert settled.cluster.switches() == {"serve_direct_ingress": True, "serve_haproxy": True}
    with pytest.raises(ConfigError, match=r"backends\.pytorch\.haproxy=False .*in place of its proxy.*pytorch_haproxy"):
        validate(load_config(["experiment.backends=[pytorch,pytorch_haproxy]"]))
    with pytest.raises(ConfigError, match=r"backends\.pytorch_haproxy\.haproxy=True .*cluster\.serve_haproxy=true"):
        validate(load_config(["experiment.backends=[pytorch_haproxy]", "cluster.serve_haproxy=false"]))
    with pytest.raises(ConfigError, match=r"one ingress per backend"):
        validate(load_config(["experiment.backends=[pytorch_haproxy]",
                              "backends.pytorch_haproxy.direct_ingress=true"]))


def test_the_switch_reaches_the_job_environment_with_haproxys_own_ports_picked_free() -> None:
    from experiments.cluster.connection import job_runtime_env

    env = job_runtime_env(load_config(["cluster.serve_haproxy=true"]).cluster)["env_vars"]
    ports = {int(env.pop(key)) for key in ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT")}
    assert len(ports) == 2 and not ports & {8404, 9101}
    assert env == {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
                   "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1", **HAPROXY_LARGE_MESSAGES}


def test_haproxy_sizing_from_the_users_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.cluster.connection import job_runtime_env

    monkeypatch.setenv("RAY_SERVE_HAPROXY_TUNE_BUFSIZE", "65536")
    env = job_runtime_env(load_config(["cluster.serve_haproxy=true"]).cluster)["env_vars"]
    assert "RAY_SERVE_HAPROXY_TUNE_BUFSIZE" not in env  # the job inherits the user's own
    assert env["RAY_SERVE_HAPROXY_H2_MAX_FRAME_SIZE"] == HAPROXY_LARGE_MESSAGES["RAY_SERVE_HAPROXY_H2_MAX_FRAME_SIZE"]


def haproxy_pids() -> set[int]:
    found = subprocess.run(["pgrep", "-x", "haproxy"], capture_output=True, text=True, check=False)
    return {int(pid) for pid in found.stdout.split()}


@pytest.mark.slow
def test_haproxy_trials_go_through_haproxy_on_the_proxys_ports_and_it_stops_with_ray() -> None:
    """And `pytorch_direct` beside it reaches the replica's own port, found as HAProxy's manager finds it."""

    from benchmarks.common import local_tier
    from experiments.measure.client_actor import ClientPool
    from experiments.plan import Trial
    from experiments.run.server_group import build_backend
    from experiments.run.trial import run_trial

    before = haproxy_pids()
    cfg = load_config(["model=tiny", "experiment.backends=[pytorch_haproxy,pytorch_direct]",
                       "experiment.batch_sizes=[1]", "experiment.window_s=0.5", "experiment.warmup_s=0.2",
                       "experiment.stability.windows=1"])
    validate(cfg)
    with local_tier(cfg) as (node, options):
        clients = ClientPool(cfg.experiment, options, 120).start()
        backend = build_backend(cfg, "pytorch_haproxy", node, options)
        direct = build_backend(cfg, "pytorch_direct", node, options)
        proxied = build_backend(cfg, "pytorch", node, options)  # what validation refuses, built around it
        try:
            handle = backend.start()
            assert handle.params["server_ingress"] == "haproxy"
            bufsize = int(HAPROXY_LARGE_MESSAGES["RAY_SERVE_HAPROXY_TUNE_BUFSIZE"])
            assert handle.params["serve_haproxy_bufsize"] == bufsize
            # the replica's own port still answers beside HAProxy (direct ingress comes on with it)
            direct_handle = direct.start()
            assert direct_handle.urls["http"] != handle.urls["http"]
            trial = Trial("local", "tiny", "pytorch", "pytorch_direct", "http", "tensor", 1, 1)
            record = run_trial(cfg, trial, direct, direct_handle, node, clients)
            assert record.status == "ok" and direct_handle.params["server_ingress"] == "direct", record.reason
            # an entry through Serve's proxy would measure HAProxy under the proxy's name: refused
            with pytest.raises(RuntimeError, match="runs HAProxy in place of its proxies"):
                proxied.start()
            ours = haproxy_pids() - before
            assert ours, "no haproxy process runs beside the sweep's Serve"
            listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
            http_port = handle.urls["http"].split(":")[2].split("/")[0]
            assert any(f"127.0.0.1:{http_port} " in line and "haproxy" in line for line in listening.splitlines()), (
                f"HAProxy does not hold the HTTP port {http_port}:\n{listening}")
            for protocol in ("http", "grpc"):
                trial = Trial("local", "tiny", "pytorch", "pytorch_haproxy", protocol, "tensor", 1, 1)
                record = run_trial(cfg, trial, backend, handle, node, clients)
                assert record.status == "ok", record.reason
                assert record.metrics["server_batch_avg"] == pytest.approx(1.0)
                assert record.metrics["completed_requests"] > 0 and record.metrics["failed_requests"] == 0
        finally:
            for started in (backend, direct, proxied):
                started.stop()
            clients.close()
    assert not haproxy_pids() & ours, "HAProxy outlived the sweep's Ray"
