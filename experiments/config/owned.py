"""What an image costs on hardware you own: the one formula the report's "Rent or own" uses.

Per hour of serving, the purchase written off over the hours the node serves (`life_years` x 8,760 x
`utilisation`), plus the energy it draws meanwhile: its GPUs' measured mean power (NVML, per trial) and
`host_watts` for the rest, at `usd_per_kwh`. Idle hours cost nothing but their share of the purchase, which the
utilisation already spreads. Rent and own break even at the utilisation where the two hourly figures meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from experiments.config.checks import Checked
from experiments.config.errors import refuse
from experiments.config.prices import cost_per_1k_images

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

HOURS_PER_YEAR = 8760
PARAM_PREFIX = "owned_"
KEYS = ("hardware_usd", "life_years", "utilisation", "usd_per_kwh", "host_watts", "source")


@dataclass
class OwnedConfig(Checked):
    """The tier priced as hardware you own instead of rent (experiments.config.owned): the purchase amortised over
    the hours it serves, plus the energy it draws while serving. Off until `hardware_usd` is set."""

    hardware_usd: float | None = None  # what one node cost to buy (its GPUs, host, a share of the rack); null: off
    life_years: float = 3.0  # years the purchase is written off over
    utilisation: float = 0.5  # the share of those years the node serves at the measured throughput
    usd_per_kwh: float = 0.15  # electricity, cooling included (a data centre's PUE times its tariff)
    host_watts: float = 0.0  # the node's draw beyond its GPUs' measured power (CPUs, fans); a CPU node's whole draw
    source: str = ""  # where the purchase price and tariff come from

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if self.hardware_usd is None:
            return []
        if self.hardware_usd < 0:
            return [refuse(f"{key}.hardware_usd", self.hardware_usd, "what one node cost, in USD >= 0 (or null: not "
                                                                     "priced as owned)")]
        if self.life_years <= 0:
            return [refuse(f"{key}.life_years", self.life_years, "years > 0 the purchase is written off over")]
        if not 0 < self.utilisation <= 1:
            return [refuse(f"{key}.utilisation", self.utilisation, "the share of the node's life it serves, in (0, 1]")]
        for name in ("usd_per_kwh", "host_watts"):
            if getattr(self, name) < 0:
                return [refuse(f"{key}.{name}", getattr(self, name), "a value >= 0")]
        return []


@dataclass(frozen=True)
class Owned:
    """A tier's ownership assumptions (`gpu.owned`, whose schema holds their defaults), as the report reads them
    back from the tier's params."""

    hardware_usd: float
    life_years: float
    utilisation: float
    usd_per_kwh: float
    host_watts: float
    source: str

    @property
    def purchase_usd_per_hour(self) -> float:
        """The purchase, per hour of serving."""
        return self.hardware_usd / (self.life_years * HOURS_PER_YEAR * self.utilisation)

    def energy_usd_per_hour(self, gpu_watts: float | None) -> float:
        watts = (gpu_watts if gpu_watts is not None and math.isfinite(gpu_watts) else 0.0) + self.host_watts
        return watts / 1000 * self.usd_per_kwh

    def usd_per_hour(self, gpu_watts: float | None) -> float:
        return self.purchase_usd_per_hour + self.energy_usd_per_hour(gpu_watts)

    def cost_per_1k_images(self, throughput_img_s: float, gpu_watts: float | None, nodes: int = 1) -> float:
        return cost_per_1k_images(self.usd_per_hour(gpu_watts), throughput_img_s, nodes)

    def break_even_utilisation(self, rent_usd_per_hour: float, gpu_watts: float | None) -> float | None:
        """The utilisation above which owning costs less than renting at `rent_usd_per_hour`; None when the energy
        alone costs more than the rent (owning never pays)."""
        margin = rent_usd_per_hour - self.energy_usd_per_hour(gpu_watts)
        if margin <= 0:
            return None
        return self.hardware_usd / (self.life_years * HOURS_PER_YEAR * margin)


def owned_params(owned: OwnedConfig) -> dict[str, Any]:
    """The assumptions as tier and trial params (`owned_<key>`); none when the tier is not priced as owned."""
    if owned.hardware_usd is None:
        return {}
    return {f"{PARAM_PREFIX}{key}": getattr(owned, key) for key in KEYS}


def owned_from_params(params: dict[str, Any]) -> Owned | None:
    """The inverse of `owned_params` (MLflow gives params back as text); a key missing there takes the schema's
    default."""
    hardware = params.get(f"{PARAM_PREFIX}hardware_usd")
    if hardware in (None, "", "None"):
        return None
    defaults = OwnedConfig()
    values = {key: params.get(f"{PARAM_PREFIX}{key}") for key in KEYS[1:-1]}
    return Owned(float(hardware), **{k: float(v) if v not in (None, "") else getattr(defaults, k)
                                     for k, v in values.items()},
                 source=str(params.get(f"{PARAM_PREFIX}source") or ""))
