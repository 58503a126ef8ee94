"""Endpoints in real sweeps against the project's own OIP service in a process of its own (tests/oip_server_process.py):
one behind a bearer token, whose token must appear nowhere the sweep writes, and one whose server goes away after
its first trial (slow)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from experiments.results.layout import TierFolder
from experiments.results.node_time import read_node_time
from serving.clients.base import ClientSpec, load_client
from serving.endpoint.probe import RTT_REQUESTS
from tests import helpers
from tests.endpoint_helpers import TOKEN_ENV, files_holding, oip_spec, sweep_args
from tests.helpers import store_uri
from tests.oip_server_process import OipServerProcess
from tests.processes import owned_environment
from tests.sweep_process import run_sweep_command

# ------------------------------------------------------------------ real sweeps against a real OIP service (slow)


@pytest.fixture(scope="module")
def token() -> str:
    return f"tbtok-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory, token: str) -> Iterator[OipServerProcess]:
    """The tiny model's OIP service in a process of its own, every route behind the bearer token."""
    with owned_environment(), OipServerProcess(tmp_path_factory.mktemp("guarded"), {TOKEN_ENV: token},
                                               TOKEN_ENV) as server:
        yield server


@pytest.mark.slow
def test_the_http_client_sends_the_bearer_token(guarded_server: OipServerProcess, token: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def call(spec: ClientSpec) -> np.ndarray:
        client = load_client(spec)
        await client.open()
        try:
            return (await client.call())[0]
        finally:
            await client.close()

    before = guarded_server.counts()
    monkeypatch.setenv(TOKEN_ENV, token)
    outputs = asyncio.run(call(oip_spec(guarded_server.url, token_env=TOKEN_ENV)))
    assert outputs.shape == (1, 1000)
    after = guarded_server.counts()
    assert after["authorized"] == before["authorized"] + 1 and after["missing"] == before["missing"]
    with pytest.raises(RuntimeError, match="HTTP 401"):
        asyncio.run(call(oip_spec(guarded_server.url)))
    monkeypatch.setenv(TOKEN_ENV, "not-the-token")
    with pytest.raises(RuntimeError, match="HTTP 403"):
        asyncio.run(call(oip_spec(guarded_server.url, token_env=TOKEN_ENV)))
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(RuntimeError, match=f"{TOKEN_ENV} .* is not set"):
        asyncio.run(call(oip_spec(guarded_server.url, token_env=TOKEN_ENV)))


def _records(tier: TierFolder) -> dict[int, dict]:
    """The tier's trial records by concurrency."""
    records = {}
    for path in sorted(tier.path.glob("trials/*/record.json")):
        record = json.loads(path.read_text())
        records[record["params"]["concurrency"]] = record
    return records


@pytest.mark.slow
def test_a_sweep_of_a_guarded_endpoint_keeps_its_token_out_of_everything(
        guarded_server: OipServerProcess, token: str, tmp_path: Path, no_leftover_processes: None) -> None:
    before = guarded_server.counts()
    args = sweep_args(tmp_path, "ep-guarded", guarded_server.url, f"backends.endpoint.token_env={TOKEN_ENV}",
                       "experiment.concurrency=[1]", "report=true")
    proc, _ = run_sweep_command(args, env={TOKEN_ENV: token}, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    tier = TierFolder.of(tmp_path / "runs", "ep-guarded", "a100")
    (record,) = _records(tier).values()
    assert record["status"] == "ok", record["reason"]
    # every request carried the token: the checks before the trial (metadata, round trip), the cross-check's, the
    # warm-up's and the measured ones
    counts = guarded_server.counts()
    assert counts["authorized"] - before["authorized"] >= 1 + RTT_REQUESTS + 1 + record["metrics"]["request_count"]
    assert counts["missing"] == before["missing"] and counts["wrong"] == before["wrong"]
    assert record["params"]["endpoint_url"] == guarded_server.url and record["params"]["server_mode"] == "endpoint"
    assert record["params"]["endpoint_authenticated"] is True and record["params"]["gpu_tier"] == "a100"
    assert record["metrics"]["endpoint_rtt_p50_ms"] > 0
    (run,) = helpers.runs(store_uri(tmp_path), sweep_id="ep-guarded")
    assert run.data.tags["status"] == "ok" and run.data.params["server_mode"] == "endpoint"
    assert run.data.params["endpoint_url"] == guarded_server.url and run.data.metrics["endpoint_rtt_p50_ms"] > 0

    # the tier's node only ran the clients: no node time charged
    assert not tier.node_time_file.exists() and read_node_time(tier) == []
    (tier_run,) = helpers.runs(store_uri(tmp_path), "tier", "ep-guarded")
    assert not {"node_uptime_s", "sweep_cost_usd"} & tier_run.data.metrics.keys()

    reports = list((tmp_path / "runs").rglob("report.md"))
    assert reports and "Endpoint `endpoint` on tier a100: a server tierbench did not start, at " \
        f"{guarded_server.url}" in reports[0].read_text()

    secret = token.encode()
    assert token not in output, "stdout / stderr"
    assert (tmp_path / "mlflow.db").exists() and secret not in (tmp_path / "mlflow.db").read_bytes()
    assert not files_holding(tmp_path, secret), "results folder, MLflow store and artifacts, report"


@pytest.mark.slow
def test_an_endpoint_that_goes_away_fails_the_rest_and_keeps_what_was_measured(
        tmp_path: Path, no_leftover_processes: None) -> None:
    runs = tmp_path / "runs"
    with owned_environment(), OipServerProcess(tmp_path / "server") as server:
        killed, sweep_over = threading.Event(), threading.Event()

        def kill_after_the_first_trial() -> None:  # its record is written once it is over
            while not list(runs.glob("*/*/trials/*/record.json")):
                if sweep_over.wait(0.02):
                    return
            server.kill()
            killed.set()

        watcher = threading.Thread(target=kill_after_the_first_trial, daemon=True)
        watcher.start()
        args = sweep_args(tmp_path, "ep-gone", server.url, "experiment.concurrency=[1,2]",
                           "experiment.trial_retries=0", "report=false")
        try:
            proc, _ = run_sweep_command(args, timeout=240)
        finally:
            sweep_over.set()
            watcher.join(timeout=30)
    output = proc.stdout + proc.stderr
    assert killed.is_set(), f"no trial record appeared: {output[-5000:]}"
    assert proc.returncode not in (0, 2), output[-5000:]
    records = _records(TierFolder.of(runs, "ep-gone", "a100"))
    assert sorted(records) == [1, 2], output[-5000:]
    assert records[1]["status"] == "ok" and records[1]["metrics"]["request_count"] > 0, records[1]["reason"]
    assert records[2]["status"] == "failed"
    assert re.search(r"refused|cannot connect|reset|did not start", records[2]["reason"]), records[2]["reason"]
    by_concurrency = {run.data.params["concurrency"]: run.data.tags["status"]
                      for run in helpers.runs(store_uri(tmp_path), sweep_id="ep-gone")}
    assert by_concurrency == {"1": "ok", "2": "failed"}
    assert not os.path.exists(TierFolder.of(runs, "ep-gone", "a100").node_time_file)
