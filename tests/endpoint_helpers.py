"""What the endpoint tests share (tests/test_endpoint*.py, test_errors_sweep.py, test_caching_audit.py): the token's
variable, the sweep they refuse or accept (`refusal`, `accepted`) or run (`sweep_args`), the backend a sweep builds
for an endpoint, the client spec they send with (`oip_spec`), and the files that hold a secret (`files_holding`).
The servers they measure are in tests/endpoint_stubs.py (in-process stand-ins) and tests/oip_server_process.py (the
project's own OIP service in a process of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.clients.base import ClientSpec

TOKEN_ENV = "TIERBENCH_TEST_ENDPOINT_TOKEN"
ENDPOINT = ["experiment=endpoint", "model=tiny", "gpu=a100"]  # a GPU tier on this CPU box: the server is elsewhere
HTTP_CLIENT = "serving.oip.clients.OipHttpClient"
GRPC_CLIENT = "serving.oip.clients.OipGrpcClient"
# The leanest endpoint sweep: one protocol, one batch, short windows.
LEAN = ["experiment.protocols=[http]", "experiment.batch_sizes=[1]", "experiment.window_s=0.5",
        "experiment.warmup_s=0.3", "experiment.warmup_requests=2", "experiment.stability.windows=1",
        "experiment.stability.max_windows=1"]


def oip_spec(url: str = "http://127.0.0.1:1", model: str = "tiny", **fields) -> ClientSpec:
    return ClientSpec(HTTP_CLIENT, url, model, "tensor", 1, (3, 224, 224), (1000,), **fields)


def refusal(*overrides: str) -> str:
    """The ConfigError `validate` raises for an endpoint sweep with `overrides` (AssertionError when none)."""
    with pytest.raises(ConfigError) as info:
        validate(load_config([*ENDPOINT, *overrides]))
    return str(info.value)


def accepted(*overrides: str) -> None:
    validate(load_config([*ENDPOINT, *overrides]))


URL = "backends.endpoint.url=http://10.0.0.5:8000"


def endpoint_backend(url: str, *overrides: str):
    """The endpoint entry's backend for `url` on this CPU node, as a sweep of tier a100 builds it."""
    from experiments.run.server_group import build_backend
    from tests.helpers import CPU_NODE

    return build_backend(load_config([*ENDPOINT, f"backends.endpoint.url={url}", *overrides]), "endpoint",
                         CPU_NODE, {})


def sweep_args(tmp: Path, sweep_id: str, url: str, *overrides: str) -> list[str]:
    """A lean endpoint sweep of `url` writing under `tmp` (its results, its MLflow store)."""
    from tests.helpers import HANG_GUARD, premigrated_store, store_uri

    premigrated_store(tmp)
    return [*ENDPOINT, f"backends.endpoint.url={url}", *LEAN, f"results_dir={tmp / 'runs'}",
            f"mlflow.tracking_uri={store_uri(tmp)}", f"sweep_id={sweep_id}", HANG_GUARD, *overrides]


def files_holding(folder: Path, secret: bytes) -> list[Path]:
    """Every file under `folder` whose bytes hold `secret`."""
    return [path for path in folder.rglob("*") if path.is_file() and secret in path.read_bytes()]
