"""Rent or own: the owned hour (purchase written off over the hours served, plus measured energy), the break-even
utilisation, the assumptions as params and back, refusals naming the key, and the report's section."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.owned import Owned, owned_from_params, owned_params
from experiments.config.prices import Price
from experiments.config.validation import validate
from experiments.report.data import SweepData, TierInfo
from experiments.report.owned_section import rent_or_own_section
from experiments.report.render import Document

# $26,280 over 3 years at 50 % utilisation: 13,140 serving hours, $2.00 an hour; 400 W + 100 W at $0.20/kWh: $0.10
H100 = Owned(hardware_usd=26_280, life_years=3, utilisation=0.5, usd_per_kwh=0.20, host_watts=100, source="a quote")


def test_an_owned_hour_is_the_purchase_over_the_hours_served_plus_the_energy_drawn() -> None:
    assert H100.purchase_usd_per_hour == pytest.approx(2.00)
    assert H100.energy_usd_per_hour(400.0) == pytest.approx(0.10)
    assert H100.usd_per_hour(400.0) == pytest.approx(2.10)
    assert H100.usd_per_hour(None) == pytest.approx(2.02), "GPU power not measured: the host's watts only"
    # 2.10 $/h at 1,000 img/s: 2.10 / 3600 / 1000 x 1000
    assert H100.cost_per_1k_images(1000.0, 400.0) == pytest.approx(2.10 / 3600)


def test_owning_pays_above_the_utilisation_where_the_two_hours_meet() -> None:
    # rent $2.90/h: margin over energy $2.80/h; 26,280 / (3 x 8,760 x 2.80) = 35.7 %
    assert H100.break_even_utilisation(2.90, 400.0) == pytest.approx(26_280 / (3 * 8760 * 2.80))
    assert H100.break_even_utilisation(0.05, 400.0) is None, "energy alone costs more than the rent"


def test_the_assumptions_travel_as_params_and_come_back_from_mlflows_text() -> None:
    cfg = load_config(["gpu=h100", "gpu.owned.hardware_usd=26280", "gpu.owned.usd_per_kwh=0.2",
                       "gpu.owned.host_watts=100", "gpu.owned.source=a quote"])
    validate(cfg)
    params = owned_params(cfg.gpu.owned)
    assert params["owned_hardware_usd"] == 26280 and params["owned_source"] == "a quote"
    back = owned_from_params({k: str(v) for k, v in params.items()})
    assert back == Owned(26280.0, 3.0, 0.5, 0.2, 100.0, "a quote")
    assert owned_params(load_config(["gpu=h100"]).gpu.owned) == {}, "not owned unless hardware_usd is set"
    assert owned_from_params({}) is None


@pytest.mark.parametrize(("override", "message"), [
    ("gpu.owned.utilisation=1.5", "gpu.owned.utilisation=1.5 is not allowed: the share of the node's life it serves"),
    ("gpu.owned.life_years=0", "gpu.owned.life_years=0.0 is not allowed: years > 0"),
    ("gpu.owned.hardware_usd=-1", "gpu.owned.hardware_usd=-1.0 is not allowed"),
])
def test_bad_assumptions_are_refused_naming_the_key(override: str, message: str) -> None:
    overrides = ["gpu=h100", override] if "hardware_usd" in override else ["gpu=h100", "gpu.owned.hardware_usd=1",
                                                                           override]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(load_config(overrides))


def _data(owned: Owned | None) -> SweepData:
    trials = pd.DataFrame([
        {"tier": "h100", "status": "ok", "stack": "triton_onnx/grpc/tensor", "batch_size": 8, "load": "c8",
         "throughput_img_s": 2000.0, "gpu_power_w": 400.0, "cost_per_1k_images_usd": 2.90 / 3600 / 2000 * 1000},
        {"tier": "h100", "status": "ok", "stack": "pytorch/http/tensor", "batch_size": 1, "load": "c1",
         "throughput_img_s": 200.0, "gpu_power_w": 150.0, "cost_per_1k_images_usd": 2.90 / 3600 / 200 * 1000}])
    return SweepData("s", "0", None, trials, {"h100": TierInfo("h100", prices=[Price("primary", 2.90)], owned=owned)})


def test_the_report_prices_each_owned_tiers_cheapest_point_both_ways() -> None:
    doc = Document("t")
    lines = rent_or_own_section(doc, _data(H100), {"h100": "h100"})
    text = doc.to_markdown()
    assert "# Rent or own" in text and "h100 · triton_onnx/grpc/tensor · b8 · c8" in text
    assert "400 W" in text and "$2 + $0.1 energy" in text and "36% utilisation" in text
    assert "$26,280 over 3 years at 50% utilisation, $0.2/kWh, host 100 W (a quote)" in text
    assert lines == ["rent or own on h100: $0.000403 rented vs $0.000292 owned per 1k images at 50% utilisation "
                     "(own is cheaper)"]


def test_a_sweep_without_ownership_assumptions_has_no_such_section() -> None:
    doc = Document("t")
    assert rent_or_own_section(doc, _data(None), {"h100": "h100"}) == []
    assert "Rent or own" not in doc.to_markdown()
