"""Endpoints, servers tierbench did not start (serving/endpoint/): what a sweep refuses before anything starts, each
refusal naming the key and never echoing a secret (fast, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.config.experiment import highest_load
from experiments.config.validation import clients_only
from tests.endpoint_helpers import ENDPOINT, TOKEN_ENV, URL, accepted, files_holding, refusal
from tests.helpers import store_uri
from tests.sweep_process import run_sweep_command

# ------------------------------------------------------------------ refusals before anything starts


def test_a_sweep_without_a_url_is_refused_naming_it() -> None:
    assert "backends.endpoint.url=''" in refusal()
    accepted(URL)


def test_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    message = refusal("backends.endpoint.url=http://alice:s3cret-pw@10.0.0.5:8000")
    assert "backends.endpoint.url" in message and "token_env" in message and "basic_auth_env" in message
    assert "s3cret-pw" not in message and "alice" not in message


def test_credentials_in_a_url_without_a_scheme_are_not_echoed_either() -> None:
    message = refusal("backends.endpoint.url=alice:s3cret-pw@10.0.0.5:8000")
    assert "backends.endpoint.url" in message
    assert "s3cret-pw" not in message


@pytest.mark.parametrize("grpc_url", ["grpc://10.0.0.5:8001", "10.0.0.5", "10.0.0.5:", "10.0.0.5:grpc"])
def test_a_grpc_url_with_a_scheme_or_without_a_port_is_refused(grpc_url: str) -> None:
    assert f"backends.endpoint.grpc_url={grpc_url!r} is not allowed" in refusal(
        URL, f"backends.endpoint.grpc_url={grpc_url}")
    accepted(URL, "backends.endpoint.grpc_url=10.0.0.5:8001")


def test_grpc_metadata_is_text_and_never_a_credential() -> None:
    accepted(URL, "backends.endpoint.grpc_url=10.0.0.5:9000", "+backends.endpoint.grpc_metadata.application=resnet18")
    secret = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0"
    message = refusal(URL, f"+backends.endpoint.grpc_metadata.authorization='{secret}'")
    assert "grpc_metadata.authorization is a credential" in message and "token_env" in message
    assert secret not in message
    for key in ("Application", "trace-bin", "grpc-timeout"):
        assert f"backends.endpoint.grpc_metadata.{key} is not allowed: a metadata key is lower case" in refusal(
            URL, f"+backends.endpoint.grpc_metadata.{key}=x")


def test_a_kind_tierbench_does_not_speak_is_refused() -> None:
    assert ("backends.endpoint.kind='kserve_v1' is not allowed: one of ['oip', 'torchserve', 'http', 'openai']"
            in refusal(URL, "backends.endpoint.kind=kserve_v1"))


@pytest.mark.parametrize("name", ["MY-TOKEN", "$TOKEN", "A TOKEN", "''"])
def test_token_env_must_name_a_variable(name: str) -> None:
    assert "backends.endpoint.token_env is not the name of an environment variable" in refusal(
        URL, f"backends.endpoint.token_env={name}")
    accepted(URL, f"backends.endpoint.token_env={TOKEN_ENV}")


def test_a_token_given_as_token_env_is_not_echoed() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0aWVyIn0.c2lnbmF0dXJl-x"
    message = refusal(URL, f"backends.endpoint.token_env={jwt}")
    assert "backends.endpoint.token_env" in message and jwt not in message


def test_max_concurrency_refuses_a_higher_concurrency() -> None:
    message = refusal(URL, "backends.endpoint.max_concurrency=2", "experiment.concurrency=[1,4]")
    assert "up to 4 requests in flight" in message and "backends.endpoint.max_concurrency=2" in message
    accepted(URL, "backends.endpoint.max_concurrency=4", "experiment.concurrency=[1,4]")


def test_max_concurrency_refuses_an_slo_search_that_would_go_higher() -> None:
    search = (URL, "backends.endpoint.max_concurrency=8", "experiment.concurrency=[1]", "experiment.slo.p99_ms=50")
    message = refusal(*search, "experiment.slo.max_concurrency=16")
    assert "up to 16 requests in flight" in message and "experiment.slo.max_concurrency" in message
    accepted(*search, "experiment.slo.max_concurrency=8")
    # without a target there is no search, and its limit is not a load
    accepted(URL, "backends.endpoint.max_concurrency=8", "experiment.concurrency=[1]",
              "experiment.slo.max_concurrency=16")


def test_max_rate_refuses_a_closed_loop() -> None:
    message = refusal(URL, "backends.endpoint.max_rate=100")
    assert "backends.endpoint.max_rate=100" in message and "experiment.load_mode=poisson" in message


def test_max_rate_refuses_a_higher_open_loop_rate() -> None:
    open_loop = (URL, "backends.endpoint.max_rate=100", "experiment.load_mode=poisson")
    message = refusal(*open_loop, "experiment.request_rates=[50,200]")
    assert "up to 200 requests/s" in message and "backends.endpoint.max_rate=100" in message
    accepted(*open_loop, "experiment.request_rates=[50,100]")
    message = refusal(*open_loop, "experiment.request_rates=[50]", "experiment.slo.p99_ms=50",
                       "experiment.slo.max_rate=400")
    assert "up to 400 requests/s" in message and "experiment.slo.max_rate" in message


def test_highest_load_and_clients_only() -> None:
    cfg = load_config([*ENDPOINT, URL, "experiment.concurrency=[1,4]"])
    assert highest_load(cfg.experiment) == (4, 0.0) and clients_only(cfg)
    poisson = load_config([*ENDPOINT, URL, "experiment.load_mode=poisson", "experiment.request_rates=[5,50]"])
    assert highest_load(poisson.experiment) == (0, 50.0)
    assert not clients_only(load_config([*ENDPOINT, URL, "experiment.backends=[endpoint,fastapi]"]))
    assert not clients_only(load_config(["model=tiny"]))


@pytest.mark.slow
def test_a_bad_value_on_the_command_line_exits_2_naming_the_key_and_no_password(tmp_path: Path) -> None:
    proc, _ = run_sweep_command([*ENDPOINT, f"results_dir={tmp_path / 'runs'}",
                                 f"mlflow.tracking_uri={store_uri(tmp_path)}", "report=false",
                                 "backends.endpoint.url=http://alice:s3cret-pw@10.0.0.5:8000"], timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "backends.endpoint.url carries credentials" in output and "s3cret-pw" not in output
    assert not files_holding(tmp_path, b"s3cret-pw"), "Hydra's .hydra/*.yaml are redacted"
    assert not (tmp_path / "mlflow.db").exists(), "refused before MLflow was touched"
