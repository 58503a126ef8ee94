"""Bad input is refused before anything starts, with the key, the value and what is allowed."""

from __future__ import annotations

import pytest

from experiments.config.compose import compose
from experiments.config.errors import ConfigError
from experiments.config.validation import validate

CASES = [
    (["experiment.backends=[tensorflow]"], "experiment.backends='tensorflow'"),
    (["experiment.load_mode=bursty"], "experiment.load_mode='bursty'"),
    (["experiment.load_mode=poisson", "experiment.request_rates=[10,0]"], "experiment.request_rates=0"),
    (["experiment.load_mode=poisson"], "experiment.request_rates=[]"),
    (["experiment.slo.p99_ms=0"], "experiment.slo.p99_ms=0"),
    (["experiment.protocols=[websocket]"], "experiment.protocols='websocket'"),
    (["experiment.input_formats=[png]"], "experiment.input_formats='png'"),
    (["experiment.batch_sizes=[0]"], "experiment.batch_sizes=0"),
    (["experiment.batch_sizes=[64]"], "model.max_batch_size=32"),
    (["experiment.concurrency=[-1]"], "experiment.concurrency=-1"),
    (["experiment.concurrency=[]"], "experiment.concurrency=[]"),
    (["gpu.price_per_hour_usd=-1"], "gpu.price_per_hour_usd=-1"),
    (["experiment.window_s=0"], "experiment.window_s=0"),
    (["experiment.warmup_s=0"], "experiment.warmup_s=0"),
    (["experiment.warmup_requests=0"], "experiment.warmup_requests=0"),
    (["telemetry.sample_hz=0"], "telemetry.sample_hz=0"),
    (["clients.placement=elsewhere"], "clients.placement='elsewhere'"),
    (["serving.triton_server=docker"], "serving.triton_server='docker' is not allowed: choose from ['auto', 'native', "
                                       "'bundled']"),
]


@pytest.mark.parametrize("overrides,fragment", CASES)
def test_bad_values_name_key_and_value(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(compose(overrides))
    assert fragment in str(info.value)
