"""Tier prices beyond the primary one: config, validation, trial and tier params, and the way back."""

from __future__ import annotations

import datetime as dt

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


def test_a_price_seen_date_is_read_from_a_day_a_month_or_a_year() -> None:
    from experiments.config.prices import seen_date

    assert seen_date("2026-03-10") == dt.date(2026, 3, 10)
    assert seen_date("2026-11") == dt.date(2026, 11, 1)
    assert seen_date("2026") == dt.date(2026, 1, 1)
    assert seen_date("") is None and seen_date("March 2026") is None and seen_date("2026-13-01") is None


def test_the_report_calls_prices_older_than_the_threshold_stale_at_the_time_the_trials_ran() -> None:
    import pandas as pd

    from experiments.config.prices import Price
    from experiments.report.data import SweepData, TierInfo
    from experiments.report.prices_section import stale_prices_note

    ran = pd.Timestamp("2026-11-27 10:00", tz="UTC")
    trials = pd.DataFrame([{"tier": "a100", "start_time": ran}, {"tier": "l4", "start_time": ran}])
    tiers = {"a100": TierInfo("a100", prices=[Price("primary", 0.894, seen="2026-08-19"),  # 100 days before
                                              Price("runpod_spot", 1.39, "spot", seen="2026-09-01")]),
             "l4": TierInfo("l4", prices=[Price("primary", 0.8048, seen="2026-09-10"), Price("mine", 0.5)])}
    note = stale_prices_note(SweepData("s", "0", None, trials, tiers))
    assert note.startswith("**Prices older than 90 days**: a100 primary $0.894/h (seen 2026-08-19, 100 days "
                           "before the trials); l4 mine $0.5/h (no date given).")
    assert "conf/gpu/<tier>.yaml" in note and "gpu.price_seen=YYYY-MM-DD" in note
    assert "runpod_spot" not in note and "l4 primary" not in note, "87 and 78 days old: current"
    longer = stale_prices_note(SweepData("s", "0", None, trials, tiers), max_age_days=200)
    assert longer.startswith("**Prices older than 200 days**: l4 mine $0.5/h (no date given).")
    assert "a100" not in longer
