"""The token ceiling and the generative verdicts: reading the engine's in-process output tokens/s at the batch a
server really generated, and what holds a trial back, from its own figures (pure logic; the engines are timed for
real in tests/test_launched_generative.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.measure.efficiency import Bottleneck
from experiments.measure.token_efficiency import (
    FIXES,
    TokenCeiling,
    engine_batch,
    read_token_ceiling,
    timed_batches,
    token_efficiency,
    token_verdict,
)
from serving.generation.ceiling import TokenEngine

CEILING = TokenCeiling(hostname="vm", input_tokens=64, output_tokens=32,
                       points={"transformers/cpu/dtype=float32": {"1": 400.0, "2": 700.0, "4": 1200.0, "8": 1800.0}})
KEY = "transformers/cpu/dtype=float32"


def test_the_ceiling_is_read_where_timed_and_between_two_batches_timed() -> None:
    assert CEILING.at(KEY, 4) == 1200.0
    assert CEILING.at(KEY, 3) == pytest.approx(950.0)  # halfway between 2 (700) and 4 (1200)
    assert CEILING.at(KEY, 16) is None and CEILING.at("vllm/cuda", 1) is None


def test_the_batches_timed_cover_every_load_and_the_powers_of_two_below_the_largest() -> None:
    assert timed_batches({1, 8}) == [1, 2, 4, 8]
    assert timed_batches({6}) == [1, 2, 4, 6]
    assert timed_batches({1}) == [1]


def test_the_engines_batch_is_what_the_server_counted_else_what_was_in_flight_up_to_its_limit() -> None:
    assert engine_batch({"server_batch_avg": 3.5}, 8, 8) == 3.5
    assert engine_batch({}, 8, 4) == 4.0 and engine_batch({}, 2, 8) == 2.0


def test_the_share_is_the_served_tokens_over_the_ceiling_at_that_batch() -> None:
    m = token_efficiency({"output_tokens_s": 600.0}, CEILING.at(KEY, 3), 3)
    assert m == {"ceiling_batch": 3.0, "ceiling_output_tokens_s": pytest.approx(950.0),
                 "ceiling_share": pytest.approx(600.0 / 950.0)}
    assert token_efficiency({"output_tokens_s": 600.0}, None, 3) == {}


def test_a_token_ceiling_file_is_told_from_an_image_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "ceiling.json"
    path.write_text(json.dumps(CEILING.to_json()))
    assert read_token_ceiling(path).at(KEY, 8) == 1800.0
    assert CEILING.tier_metrics()["ceiling/transformers/cpu/dtype-float32/b8_output_tokens_s"] == 1800.0
    path.write_text(json.dumps({"hostname": "vm", "timings": {}, "errors": {}}))
    assert read_token_ceiling(path) is None and read_token_ceiling(tmp_path / "none.json") is None


def test_an_engines_key_names_its_kind_device_and_settings_and_survives_json() -> None:
    engine = TokenEngine("transformers", "cpu", (("dtype", "float32"), ("threads", None)), 8)
    assert engine.key == "transformers/cpu/dtype=float32"
    assert TokenEngine.from_json(json.loads(json.dumps(engine.to_json()))) == engine


def verdict(metrics: dict, concurrency: int = 4, max_batch: int = 8, on_gpu: bool = False):
    return token_verdict(metrics, {"concurrency": concurrency}, on_gpu, 0.9, max_batch)


@pytest.mark.parametrize(("metrics", "concurrency", "max_batch", "on_gpu", "expected", "evidence"), [
    ({"client_cpu_util_max": 0.97}, 4, 8, False, Bottleneck.CLIENT, "97 % of a core"),
    ({"server_kv_cache_bound": 1, "server_preemptions": 12, "server_kv_cache_usage_pct": 98}, 64, 256, True,
     Bottleneck.KV_CACHE, "12 requests preempted; the KV cache 98 % full"),
    ({}, 16, 8, False, Bottleneck.QUEUE, "16 conversations in flight and one engine generates 8"),
    ({"server_batch_avg": 2.0}, 8, 8, False, Bottleneck.QUEUE, "each generate carried 2.0 conversations of the 8"),
    ({"server_queue_bound": 1}, 4, 8, True, Bottleneck.QUEUE, "waiting for a seat"),
    ({"gpu_util_pct": 95, "ttft_mean_ms": 300, "latency_mean_ms": 400}, 4, 8, True, Bottleneck.PREFILL,
     "the first token took 300.0 ms of a 400.0 ms answer"),
    ({"gpu_util_pct": 95, "ttft_mean_ms": 30, "latency_mean_ms": 400, "tpot_mean_ms": 12}, 4, 8, True,
     Bottleneck.DECODE, "12.00 ms per output token"),
    ({"ceiling_share": 0.8, "ceiling_batch": 4, "ceiling_output_tokens_s": 1200, "ttft_mean_ms": 20,
      "latency_mean_ms": 200}, 4, 8, False, Bottleneck.DECODE, "it streamed 80 % of the engine's in-process 1,200"),
    ({"ceiling_share": 0.4, "ceiling_batch": 4, "ceiling_output_tokens_s": 1200}, 4, 8, False, Bottleneck.TRANSPORT,
     "it streamed 40 %"),
    ({"gpu_util_pct": 30}, 1, 8, True, Bottleneck.LOAD, "1 conversations in flight"),
])
def test_each_verdict_is_decided_by_its_own_numbers(metrics: dict, concurrency: int, max_batch: int, on_gpu: bool,
                                                     expected: Bottleneck, evidence: str) -> None:
    judged = verdict(metrics, concurrency, max_batch, on_gpu)
    assert judged.bottleneck is expected and evidence in judged.evidence, judged
    tags = judged.tags()
    assert tags["bottleneck_fix"] == FIXES.get(expected, expected.fix) and tags["bottleneck_fix"]
