"""The names an SLO summary's figures take, in its workload's unit and after its targets (`experiments.run.slo` writes
them, the report reads them): `slo_max_throughput_img_s` and `cost_per_1k_images_at_slo_usd` for images,
`slo_max_output_tokens_s` and `cost_per_1m_output_tokens_at_slo_usd` for tokens; `slo_<target>` and
`slo_<target>_at_max_ms` per latency target (`p99_ms`; `ttft_p99_ms`, `tpot_p99_ms`)."""

from __future__ import annotations

from dataclasses import dataclass

from serving.workloads.registry import workload as workload_named
from serving.workloads.workload import Workload

# An SLO key whose figure is named otherwise: the image target `p99_ms` bounds every request's end-to-end p99. The
# others (`ttft_p99_ms`, `tpot_p99_ms`) are named as the figures they bound.
FIGURE_OF = {"p99_ms": "latency_p99_ms"}
# A target's short name in run names and sentences.
LABELS = {"p99_ms": "p99", "ttft_p99_ms": "TTFT p99", "tpot_p99_ms": "TPOT p99"}


def at_max(key: str) -> str:
    """`slo_p99_at_max_ms`, `slo_ttft_p99_at_max_ms`: the summary's figure of target `key` at its highest load."""
    return f"slo_{key.removesuffix('_ms')}_at_max_ms"


@dataclass(frozen=True)
class SloNames:
    """An SLO summary's figures in the workload's unit: `slo_max_throughput_img_s` and `cost_per_1k_images_at_slo_usd`
    for images, `slo_max_output_tokens_s` and `cost_per_1m_output_tokens_at_slo_usd` for tokens."""

    throughput: str  # the probe's figure: throughput_img_s, output_tokens_s
    goodput: str  # goodput_img_s, goodput_output_tokens_s
    cost: str  # cost_per_1k_images_at_slo_usd, cost_per_1m_output_tokens_at_slo_usd
    per: float  # the units the cost prices: 1k images, 1M tokens

    @classmethod
    def of(cls, workload: Workload) -> SloNames:
        return cls(workload.throughput, "goodput_" + workload.throughput.removeprefix("throughput_"),
                   workload.cost.removesuffix("_usd") + "_at_slo_usd", workload.per)

    @property
    def max_throughput(self) -> str:
        return f"slo_max_{self.throughput}"

    @property
    def max_goodput(self) -> str:
        return f"slo_max_{self.goodput}"


IMAGE = SloNames.of(workload_named("image"))
