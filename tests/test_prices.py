"""Tier prices beyond the primary one: config, validation, trial and tier params, and the way back."""

from __future__ import annotations

import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.prices import prices_from_params, tier_price_params, tier_prices, trial_price_params
from experiments.config.validation import validate
from experiments.plan import Trial
from experiments.run.trial import new_record
from serving.node import NodeInfo


def test_gpu_tiers_list_cited_alternative_prices() -> None:
    for tier in ("a100", "rtx4090", "h100"):
        gpu = load_config([f"gpu={tier}"]).gpu
        prices = tier_prices(gpu)
        assert prices[0].name == "primary" and prices[0].usd_per_hour == gpu.price_per_hour_usd
        assert {p.name for p in prices[1:]} == {"runpod_spot", "runpod_on_demand"}
        for price in prices[1:]:
            assert price.usd_per_hour > 0 and price.source.count("https://") == 1 and price.seen
    spot = {p.name: p for p in tier_prices(load_config(["gpu=rtx4090"]).gpu)}["runpod_spot"]
    assert (spot.usd_per_hour, spot.kind, spot.provider) == (0.34, "spot", "RunPod")


def test_a_price_can_be_added_on_the_command_line() -> None:
    cfg = load_config(["+gpu.prices.mine={usd_per_hour:0.2,kind:reserved,source:my invoice,seen:2026-11-01}"])
    validate(cfg)
    assert trial_price_params(cfg.gpu) == {"price_mine_per_hour_usd": 0.2}


@pytest.mark.parametrize("override,message", [
    ("+gpu.prices.Spot={usd_per_hour:0.2}", "gpu.prices.Spot: the name 'Spot' is not allowed"),
    ("+gpu.prices.spot={usd_per_hour:-1}", "gpu.prices.spot.usd_per_hour=-1 is not allowed"),
    ("+gpu.prices.spot={kind:spot}", "gpu.prices.spot.usd_per_hour=None is not allowed"),
    ("+gpu.prices.spot={usd_per_hr:0.2}", "gpu.prices.spot.usd_per_hr is not a price key"),
    ("+gpu.prices.spot=0.2", "gpu.prices.spot=0.2 is not allowed: give a mapping"),
])
def test_bad_prices_are_refused_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(load_config([override]))


def test_trials_and_tier_runs_carry_every_price_and_the_report_gets_them_back() -> None:
    cfg = load_config(["gpu=a100"])
    node = NodeInfo("h", "127.0.0.1", "n", "cpu", 2)
    record = new_record(cfg, Trial("a100", "resnet18", "pytorch", "pytorch", "http", "jpeg", 1, 1), node)
    assert record.params["price_per_hour_usd"] == 0.894
    assert record.params["price_runpod_spot_per_hour_usd"] == 1.39
    assert record.params["price_runpod_on_demand_per_hour_usd"] == 2.45
    tier = {"price_per_hour_usd": 0.894, "price_source": cfg.gpu.price_source, "price_seen": "2026-02-20",
            **{k: str(v) for k, v in tier_price_params(cfg.gpu).items()}}  # MLflow params come back as strings
    assert prices_from_params(tier) == tier_prices(cfg.gpu)
