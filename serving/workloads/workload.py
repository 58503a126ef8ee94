"""What a workload tells the rest of tierbench, through one line of the registry (`serving/workloads/registry.py`):
its name (`experiment.workload`), its unit and the request formats it sends, the figures a tier is sized and priced on,
the SLO keys its search reads, its metrics, how its per-request records become figures, and which of the engine's
image-only steps apply to it. Everything else of the workload stays in its folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serving.metric import Metric

# (samples, usd_per_hour, slo) -> figures: `samples` is experiments.measure.samples.WindowSamples, `slo` the
# experiment's SloConfig
Figures = Callable[[Any, float, Any], dict[str, float]]


@dataclass(frozen=True)
class Workload:
    name: str  # `experiment.workload`, the trial param `workload`
    unit: str  # what a tier's throughput counts: image | token
    per: float  # the cost figure's quantity of units: 1,000 images, 1,000,000 tokens
    request_formats: tuple[str, ...]  # what `experiment.input_formats` may name
    throughput: str  # the figure a tier is sized on (its capacity plan, the SLO search's best): throughput_img_s, ...
    cost: str  # the headline cost figure, at the throughput: cost_per_1k_images_usd, cost_per_1m_output_tokens_usd
    latency: str  # the latency figure its Pareto plot and simple SLO read: latency_p99_ms, ttft_p99_ms
    slo_targets: tuple[str, ...]  # the keys of experiment.slo its search and goodput read
    metrics: tuple[Metric, ...]  # its own figures (the engine's catalog declares the ones every workload shares)
    figures: Figures  # its figures over merged windows, beyond the shared ones (latency, requests/s, errors)
    throughput_of: Callable[[Any], float]  # the throughput of one window: what the stability rule compares
    params_of: Callable[[Any], dict[str, str]] = lambda samples: {}  # what its samples say as params
    # Its figures priced at the tier's price: (cost figure, the rate it is computed from, the units it prices), e.g.
    # ("cost_per_1m_tokens_usd", "total_tokens_s", 1e6). The repeats of a trial pool each rate and price it again.
    costs: tuple[tuple[str, str, float], ...] = ()
    # Its per-request raw figures by family, in seconds (a generative trial's "ttft", "tpot", "itl"): the repeats of a
    # trial pool them and compute `<family>_p<N>_ms` again, with intervals.
    raw_figures: Callable[[Any], dict[str, Any]] = lambda samples: {}
    # The figures a request format (an `experiment.input_formats` value) never has: a generative answer not streamed
    # has no token timing (TTFT, ITL, TPOT). An SLO search whose targets bound one of them skips that format's points.
    lacks: Callable[[str], frozenset[str]] = lambda request_format: frozenset()
    # The engine's steps for an image model: ship the model's file, cross-check outputs against the reference,
    # time the runtime's ceiling, build the image corpus. A workload that does not serve an image model skips them.
    image_model: bool = False

    def unmeasured(self, request_format: str, bounds: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """Of `bounds` ({target key: the figure it bounds}), the keys whose figure `request_format`'s requests never
        have, and the request formats that have every one of those figures: no load of `request_format` can meet such
        a target (the SLO search skips it, a settings search refuses it)."""
        missing = [key for key, figure in bounds.items() if figure in self.lacks(request_format)]
        figures = {bounds[key] for key in missing}
        having = [f for f in self.request_formats if not figures & self.lacks(f)] if missing else []
        return missing, having

    @property
    def cost_label(self) -> str:
        """`$ per 1k images`, `$ per 1M tokens`."""
        quantity = {1e3: "1k", 1e6: "1M"}.get(self.per, f"{self.per:g}")
        return f"$ per {quantity} {self.unit}s"
