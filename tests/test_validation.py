"""Bad input is refused before anything starts, with the key, the value and what is allowed. Every row of
the validation list is refused as the command line refuses it (the command-line check, then
`validate()` on the composed config), in one line naming the key and the bad value. From the command line itself
(exit code 2, within seconds, nothing started: no Ray, no server, no MLflow store), one row per way a command
line is refused: a bad group option (inside a sweep), a malformed override, a key or type the schemas refuse,
a value `validate()` refuses in the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.overrides import check_overrides
from experiments.config.validation import validate
from tests.helpers import store_overrides
from tests.processes import server_processes
from tests.sweep_process import run_sweep_command

ROWS = [
    ("unknown tier", ["gpu=tpu"], "gpu='tpu' is not allowed"),
    ("unknown tier in a sweep", ["gpu=a100,tpu", "-m"], "gpu='tpu' is not allowed"),
    ("unknown backend", ["experiment.backends=[tensorflow]"], "experiment.backends='tensorflow'"),
    ("unknown protocol", ["experiment.protocols=[websocket]"], "experiment.protocols='websocket'"),
    ("unknown input format", ["experiment.input_formats=[png]"], "experiment.input_formats='png'"),
    ("batch <= 0", ["experiment.batch_sizes=[0]"], "experiment.batch_sizes=0"),
    ("batch above the model's max", ["experiment.batch_sizes=[1,64]"], "experiment.batch_sizes=64"),
    ("concurrency <= 0", ["experiment.concurrency=[0]"], "experiment.concurrency=0"),
    ("negative min_requests", ["experiment.stability.min_requests=-1"], "experiment.stability.min_requests=-1"),
    ("rate <= 0", ["experiment.load_mode=poisson", "experiment.request_rates=[-5]"], "experiment.request_rates=-5"),
    ("unknown load engine", ["experiment.load_engine=perf_analyzer"], "experiment.load_engine='perf_analyzer'"),
    ("unknown backend setting", ["+backends.pytorch.num_replica=2"], "backends.pytorch.num_replica=2"),
    ("misspelt backend setting", ["backends.pytorch.num_replica=2"], "backends.pytorch.num_replica=2"),
    ("backend setting of the wrong type", ["backends.pytorch.half=maybe"], "backends.pytorch.half='maybe'"),
    ("unknown accelerator", ["backends.triton_onnx.accelerator=rocm"], "backends.triton_onnx.accelerator='rocm'"),
    ("negative price", ["gpu.price_per_hour_usd=-0.5"], "gpu.price_per_hour_usd=-0.5"),
    ("missing price", ["gpu.price_per_hour_usd=???"], "gpu.price_per_hour_usd='???' is not allowed: set a price"),
    ("window <= 0", ["experiment.window_s=0"], "experiment.window_s=0"),
    ("warm-up <= 0", ["experiment.warmup_s=-1"], "experiment.warmup_s=-1"),
    ("negative retries", ["experiment.trial_retries=-1"], "experiment.trial_retries=-1"),
    ("repeats < 1", ["experiment.repeats=0"], "experiment.repeats=0 is not allowed: a whole number >= 1"),
    ("repeats not a whole number", ["experiment.repeats=1.5"], "experiment.repeats=1.5 is not allowed"),
    ("malformed override", ["experiment.batch_sizes=[1,"], "override 'experiment.batch_sizes=[1,' is malformed"),
    ("unknown load mode", ["experiment.load_mode=bursty"], "experiment.load_mode='bursty'"),
    ("a zero rate", ["experiment.load_mode=poisson", "experiment.request_rates=[10,0]"], "experiment.request_rates=0"),
    ("open loop without rates", ["experiment.load_mode=poisson"], "experiment.request_rates=[]"),
    ("SLO target <= 0", ["experiment.slo.p99_ms=0"], "experiment.slo.p99_ms=0"),
    ("batch above the model's max, alone", ["experiment.batch_sizes=[64]"], "model.max_batch_size=32"),
    ("no concurrency", ["experiment.concurrency=[]"], "experiment.concurrency=[]"),
    ("warm-up requests <= 0", ["experiment.warmup_requests=0"], "experiment.warmup_requests=0"),
    ("sample rate <= 0", ["telemetry.sample_hz=0"], "telemetry.sample_hz=0"),
    ("unknown client placement", ["clients.placement=elsewhere"], "clients.placement='elsewhere'"),
    ("unknown Triton server", ["backends.triton_onnx.server=docker"], "backends.triton_onnx.server='docker' is not "
                                                                      "allowed: choose from ['auto', 'native', "
                                                                      "'bundled']"),
    ("the Triton server's old key", ["serving.triton_server=bundled"], "serving.triton_server='bundled' is not "
                                                                       "allowed: Triton's server is a setting of each "
                                                                       "Triton entry now"),
]


@pytest.mark.parametrize("overrides,fragment", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_every_row_is_refused_in_one_line_naming_key_and_value(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_overrides(overrides)  # what `python -m runners.sweep` checks before Hydra starts
        validate(load_config(overrides))  # what its job checks before anything starts
    message = str(info.value)
    assert fragment in message and "\n" not in message and ("not allowed" in message or "malformed" in message)


CLI_ROWS = ["unknown tier in a sweep", "malformed override", "backend setting of the wrong type",
            "batch above the model's max", "unknown backend setting"]


@pytest.mark.slow
@pytest.mark.parametrize("overrides,fragment", [r[1:] for r in ROWS if r[0] in CLI_ROWS], ids=CLI_ROWS)
def test_bad_input_is_refused_before_anything_starts(tmp_path: Path, overrides: list[str], fragment: str) -> None:
    before = server_processes()
    proc, _ = run_sweep_command([*overrides, *store_overrides(tmp_path)], timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert fragment in output
    error_lines = [line for line in output.splitlines() if fragment in line]
    assert len(error_lines) == 1 and ("not allowed" in error_lines[0] or "malformed" in error_lines[0])
    assert "stopped the local Ray this sweep started" not in output, "refused before Ray started"
    assert not (tmp_path / "mlflow.db").exists(), "no MLflow run may start"
    assert not list((tmp_path / "runs").glob("*/*/trials")), "no trial may start"
    assert not server_processes() - before
