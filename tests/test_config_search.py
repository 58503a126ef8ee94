"""`experiment.search` before anything starts (a bad space refused with the key, the value and the fix), its
candidates as backend entries, and the report's "Deploy this" from a store of known (synthetic) runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.search import add_candidate, candidate_settings, space_of
from experiments.config.validation import validate
from experiments.report.build import ReportOptions
from experiments.report.data import load_sweep
from experiments.report.deploy import best_per_backend, best_per_tier, deploy_section
from experiments.report.publish import make_report
from experiments.report.render import Document
from experiments.run.backend_search import BackendSearch
from experiments.run.server_group import ServerRelay
from serving.backend import ServerHandle
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store

CHEAPEST = ["experiment=cheapest", "model=tiny"]


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        validate(load_config([*CHEAPEST, *overrides]))
    return str(caught.value)


def test_the_preset_searches_triton_and_serve_from_their_own_settings() -> None:
    cfg = load_config(CHEAPEST)
    validate(cfg)
    assert space_of(cfg, "triton_onnx_dynbatch") == {"instance_count": [1, 2, 3, 4],
                                                     "max_queue_delay_us": [0, 500, 2000, 10000]}
    assert space_of(cfg, "pytorch_haproxy_batched") == {"num_replicas": [1, 2, 4],
                                                        "batch_wait_timeout_s": [0.001, 0.005, 0.02],
                                                        "batcher": ["serve", "when_free"]}
    assert cfg.cluster.serve_haproxy and "pytorch_batched" not in cfg.experiment.backends, "HAProxy replaces the proxy"
    proxy = load_config([*CHEAPEST, "experiment.backends=[pytorch_batched]"])
    validate(proxy)  # Serve's own proxy, searched in a sweep of its own
    assert space_of(proxy, "pytorch_batched") == space_of(cfg, "pytorch_haproxy_batched")
    assert space_of(cfg, "pytorch_direct_batched") == {"batch_wait_timeout_s": [0.001, 0.005, 0.02],
                                                       "batcher": ["serve", "when_free"]}, "its own, no replicas"
    assert space_of(load_config([*CHEAPEST, "experiment.search.strategy=none"]), "triton_onnx_dynbatch") is None


def test_a_backends_own_space_takes_the_place_of_its_classs() -> None:
    cfg = load_config([*CHEAPEST, "+experiment.search.space.triton_onnx_dynbatch={instance_count: [1, 2]}"])
    validate(cfg)
    assert space_of(cfg, "triton_onnx_dynbatch") == {"instance_count": [1, 2]}
    assert space_of(cfg, "triton_trt_dynbatch") == {"instance_count": [1, 2, 3, 4],
                                                    "max_queue_delay_us": [0, 500, 2000, 10000]}, "the class's"
    # a space for a backend entry the sweep does not serve is no error: the preset's, with other backends chosen
    validate(load_config([*CHEAPEST, "experiment.backends=[triton_onnx_dynbatch]"]))


def test_a_value_only_this_backend_refuses_points_to_a_space_of_its_own() -> None:
    """Direct ingress serves from one replica: the class's num_replicas=[1,2,4] is refused for it, with the space
    that works (every other value kept) as the override to paste."""
    message = refused("experiment.backends=[pytorch_direct_batched]", "~experiment.search.space.pytorch_direct_batched")
    assert message.startswith("experiment.search.space.ray_serve.num_replicas=[1, 2, 4] is not allowed: the value 2 "
                              "gives: backends.pytorch_direct_batched.num_replicas=2 is not allowed: direct_ingress")
    fix = message.split("in place of ray_serve's: '")[1].split("'")[0]
    assert fix == ('+experiment.search.space.pytorch_direct_batched={num_replicas: [1], batch_wait_timeout_s: '
                   '[0.001, 0.005, 0.02], batcher: ["serve", "when_free"]}')
    cfg = load_config([*CHEAPEST, "experiment.backends=[pytorch_direct_batched]",
                       "~experiment.search.space.pytorch_direct_batched", fix])
    validate(cfg)
    assert space_of(cfg, "pytorch_direct_batched")["num_replicas"] == [1]
    # a value no backend of the class takes gets no such advice; in a backend's own space, its own key is named
    assert "space of its own" not in refused("experiment.search.space.triton.instance_count=[1,0]")
    assert refused("+experiment.search.space.pytorch_direct_batched.num_replicas=[1,2]").startswith(
        "experiment.search.space.pytorch_direct_batched.num_replicas=[1, 2] is not allowed: the value 2 gives")


@pytest.mark.parametrize(("overrides", "message"), [
    (["experiment.slo.p99_ms=null"], "experiment.slo.p99_ms=None is not allowed with experiment.search.strategy=quick"
                                     ": the search keeps the settings with the highest throughput within a p99 target; "
                                     "set one, e.g. experiment.slo.p99_ms=50"),
    (["+experiment.search.space.triton.accelerator=[cpu,cuda]"], "experiment.search.space.triton.accelerator is not "
                                                                 "allowed: not a setting the search varies for triton"),
    (["+experiment.search.space.triton.instance_cont=[1,2]"], "experiment.search.space.triton.instance_cont is not "
                                                              "allowed"),
    (["experiment.search.space.triton.instance_count=[]"], "experiment.search.space.triton.instance_count=[] is not "
                                                           "allowed: give a non-empty list of values to try"),
    (["experiment.search.space.triton.instance_count=[1,0]"], "the value 0 gives: backends.triton_onnx_dynbatch."
                                                              "instance_count=0 is not allowed: a positive integer"),
    (["experiment.search.space.triton.instance_count=[2,2]"], "a value is listed twice"),
    (["experiment.search.space.ray_serve.batch_wait_timeout_s=[-1]"], "batch_wait_timeout_s=-1 is not allowed"),
    (["experiment.search.strategy=best"], "experiment.search.strategy='best' is not allowed: choose from ['none', "
                                          "'grid', 'quick']"),
    (["+experiment.search.space.tensorflow={threads:[1]}"], "experiment.search.space.tensorflow is not allowed: the "
                                                            "space is keyed by backend class, one of ['endpoint', "
                                                            "'fastapi', 'ray_serve', 'serve_llm', "
                                                            "'serve_transformers', 'torchserve', 'triton', "
                                                            "'triton_stream', 'vllm'], or by "
                                                            "the name of a backend entry"),
    (["experiment.protocols=[http,grpc]"], "experiment.protocols=['http', 'grpc'] is not allowed with a settings "
                                           "search"),
    (["experiment.backends=[triton_onnx]"], "whose dynamic_batching=false (the setting only applies with it on): "
                                            "search a variant with dynamic_batching: true, or add experiment.search."
                                            "space.triton.dynamic_batching=[false,true]"),
    (["+experiment.search.space.triton.max_batch_size=[8,64]"], "the value 64 gives: backends.triton_onnx_dynbatch."
                                                                "max_batch_size=64 is not allowed: in 1..model."
                                                                "max_batch_size=32"),
    (["experiment.batch_sizes=[8]", "+experiment.search.space.triton.max_batch_size=[4,8]"],
     "the value 4 gives: backends.triton_onnx_dynbatch.max_batch_size=4 is not allowed: at least 8, the largest of "
     "experiment.batch_sizes (Triton refuses a request above it), or null"),
    (["experiment.search.strategy=none", "+backends.triton_onnx.max_batch_size=8",
      "experiment.backends=[triton_onnx]"], "backends.triton_onnx.max_batch_size=8 is not allowed: it only applies "
                                            "with dynamic_batching=true"),
    (["experiment.search.strategy=none", "+backends.triton_onnx_dynbatch.max_batch_size=4",
      "experiment.batch_sizes=[8]"], "backends.triton_onnx_dynbatch.max_batch_size=4 is not allowed: at least 8"),
])
def test_a_bad_search_is_refused_naming_the_key_the_value_and_the_fix(overrides: list[str], message: str) -> None:
    assert message in refused(*overrides)


def test_a_candidate_is_a_backend_entry_and_a_switched_off_setting_goes_back_to_its_default() -> None:
    cfg = load_config([*CHEAPEST, "experiment.backends=[triton_onnx]",
                       "+experiment.search.space.triton.dynamic_batching=[false,true]"])
    validate(cfg)  # the switch is searched too: a delay with batching off is the same candidate as no delay
    name = add_candidate(cfg, "triton_onnx", {"instance_count": 2, "max_queue_delay_us": 500, "dynamic_batching": True})
    assert name == "triton_onnx+instance_count=2+max_queue_delay_us=500+dynamic_batching=true"
    settings = cfg.backends[name]
    assert (settings.instance_count, settings.max_queue_delay_us, settings.dynamic_batching) == (2, 500, True)
    assert settings.family == "triton_onnx" and settings.accelerator == cfg.backends["triton_onnx"].accelerator
    off = add_candidate(cfg, "triton_onnx", {"instance_count": 2, "max_queue_delay_us": 500, "dynamic_batching": False})
    assert off == "triton_onnx+instance_count=2+max_queue_delay_us=0+dynamic_batching=false"
    assert candidate_settings(cfg.backends["triton_onnx"], {"max_queue_delay_us": 500}).max_queue_delay_us == 0


def test_a_candidate_reuses_the_running_server_only_when_it_changes_what_the_server_reloads() -> None:
    cfg = load_config(CHEAPEST)
    triton = cfg.backends["triton_onnx_dynbatch"]
    assert candidate_settings(triton, {"instance_count": 3, "max_queue_delay_us": 2000}).reloadable_from(triton)
    assert not dataclasses.replace(triton, accelerator="tensorrt").reloadable_from(triton), "a new ONNX Runtime EP"
    assert not dataclasses.replace(triton, preprocess_instance_count=3).reloadable_from(triton), "another model"
    assert not candidate_settings(triton, {"max_batch_size": 8}).reloadable_from(triton), "the ensemble's bound too"
    serve = cfg.backends["pytorch_batched"]
    assert not candidate_settings(serve, {"num_replicas": 2}).reloadable_from(serve), "Serve redeploys its app"
    assert not serve.reloadable_from(triton)


def test_a_search_starts_from_the_settings_as_served_a_null_max_batch_size_being_the_models() -> None:
    cfg = load_config([*CHEAPEST, "+experiment.search.space.triton.max_batch_size=[8,16,32]",
                       "+experiment.search.space.ray_serve.max_batch_size=[4,8]"])
    validate(cfg)
    nothing = lambda *_: None  # noqa: E731 - nothing runs: only the start is read
    triton = BackendSearch(cfg, SimpleNamespace(variant="triton_onnx_dynbatch"), nothing, nothing, nothing)
    assert triton.space.values(triton.start) == {"instance_count": 1, "max_queue_delay_us": 2000, "max_batch_size": 32}
    serve = BackendSearch(cfg, SimpleNamespace(variant="pytorch_batched"), nothing, nothing, nothing)
    assert serve.space.values(serve.start)["max_batch_size"] == 8, "the model's 32, nearest listed"


class Held:
    """A server group as the relay sees it: its backend adopts (a handle) or not (None)."""

    def __init__(self, name: str, adopts: bool, events: list[str]) -> None:
        self.group = SimpleNamespace(variant=name)
        self.backend = SimpleNamespace(adopt=lambda running: ServerHandle("reloaded", {}) if adopts else None)
        self.events = events

    def stop(self) -> dict[str, str]:
        self.events.append(f"stop {self.group.variant}")
        return {}

    def stop_telemetry(self) -> None:
        self.events.append(f"telemetry off {self.group.variant}")


def test_the_relay_hands_the_server_on_or_stops_it_before_the_next_starts() -> None:
    events: list[str] = []
    relay = ServerRelay()
    first, second, third = Held("a", True, events), Held("b", True, events), Held("c", False, events)
    assert relay.pass_to(first) is None, "nothing held: the first candidate starts its own server"
    relay.hold(first)
    assert relay.pass_to(second).server_mode == "reloaded" and events == ["telemetry off a"], "taken over, not stopped"
    relay.hold(second)
    assert relay.pass_to(third) is None and events[-1] == "stop b", "could not take it: stopped before c starts"
    relay.hold(third)
    relay.stop()
    relay.stop()
    assert events[-2:] == ["telemetry off c", "stop c"], "the last one stopped at the end, once"


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("search")
    uri = premigrated_store(folder)
    syn.build_searched(uri)
    return uri, folder


def test_deploy_this_picks_each_tiers_best_and_the_cheapest_tier(searched) -> None:
    best = best_per_tier(load_sweep(searched[0], "tierbench", syn.SEARCH_SWEEP_ID).slo).set_index("tier")
    assert best.loc["a100", "settings"] == "instance_count=2, max_queue_delay_us=2000"
    assert best.loc["a100", "slo_max_throughput_img_s"] == 400.0
    assert best.loc["a100", "cost_per_1k_images_at_slo_usd"] == pytest.approx(0.1 / 400)
    assert best.loc["a100", "default_cost"] == pytest.approx(0.1 / 200)  # the start: instance_count=1
    assert best.loc["a100", "candidates"] == 4
    assert best.loc["rtx4090", "settings"] == "instance_count=2, max_queue_delay_us=500"
    assert best.loc["rtx4090", "cost_per_1k_images_at_slo_usd"] == pytest.approx(0.05 / 240)


def test_each_searched_backend_gets_its_best_beside_the_tiers_winner() -> None:
    """A tier whose search covered Triton and Serve (proxied and direct): the winner above, and below it each
    backend's own best, cheapest first, one that met the SLO nowhere said so."""
    def probe(backend: str, values: str, img_s: float | None, start: bool = False) -> dict:
        met = img_s is not None
        return {"tier": "local", "search_of": backend, "status": "ok", "slo_met": float(met),
                "slo_max_throughput_img_s": img_s or 0.0, "search_start": "true" if start else "false",
                "protocol": "grpc", "input_format": "tensor", "batch_size": 1, "search_values": values,
                "variant": f"{backend}+{values}", "slo_p99_at_max_ms": 150.0 if met else None,
                "cost_per_1k_images_at_slo_usd": 0.1 / 3.6 / img_s if met else None, "search_strategy": "quick",
                "slo_ceiling_share_at_max": img_s / 100 if met else None, "bottleneck": "cpu" if met else None,
                "slo_p99_ms": 200.0}
    slo = pd.DataFrame([probe("triton_onnx_dynbatch", '{"instance_count": 1}', 70.0, start=True),
                        probe("triton_onnx_dynbatch", '{"instance_count": 2}', 77.0),
                        probe("pytorch_batched", '{"num_replicas": 1}', 34.5, start=True),
                        probe("pytorch_direct_batched", '{"batcher": "serve"}', 30.0, start=True),
                        probe("pytorch_direct_batched", '{"batcher": "when_free"}', 45.5),
                        probe("pytorch_fp16_direct_batched", '{"batcher": "serve"}', None, start=True)])
    each = best_per_backend(slo).set_index("backend")
    assert each.loc["pytorch_direct_batched", "settings"] == "batcher=when_free"
    assert each.loc["pytorch_direct_batched", "default_throughput"] == 30.0
    assert pd.isna(each.loc["pytorch_fp16_direct_batched", "settings"])
    assert best_per_tier(slo)["backend"].tolist() == ["triton_onnx_dynbatch"]
    doc = Document("report")
    deploy_section(doc, SimpleNamespace(slo=slo), {})
    text = doc.to_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| local | ")]
    assert [row.split(" | ")[1] for row in rows[1:]] == ["triton_onnx_dynbatch", "pytorch_direct_batched",
                                                       "pytorch_batched", "pytorch_fp16_direct_batched"]
    assert rows[2].startswith("| local | pytorch_direct_batched | batcher=when_free | 45.5 | 150.0 |")
    assert "| 46 % | cpu | 1.52× |" in rows[2]  # its share of the ceiling, verdict, gain over its start (45.5 / 30)
    assert "| none meets the SLO |" in rows[4]


def test_deploy_this_says_when_another_candidates_lower_load_served_more() -> None:
    """The search rates a candidate at its highest load within the target; the answer takes the cheapest trial. Where
    a lower load of a losing candidate served more than the winner's highest, "Deploy this" says why it still names
    the winner, with both figures; where the winner's own trial is the fastest, it says nothing more."""
    def summary(delay: int, img_s: float) -> dict:
        return {"tier": "local", "search_of": "triton_onnx_dynbatch", "status": "ok", "slo_met": 1.0,
                "slo_max_throughput_img_s": img_s, "search_start": "false", "protocol": "grpc",
                "input_format": "tensor", "batch_size": 1, "search_values": f'{{"max_queue_delay_us": {delay}}}',
                "variant": f"triton_onnx_dynbatch+max_queue_delay_us={delay}", "slo_p99_at_max_ms": 150.0,
                "cost_per_1k_images_at_slo_usd": 0.1 / 3.6 / img_s, "search_strategy": "quick", "slo_p99_ms": 200.0}

    def trial(delay: int, load: str, img_s: float, p99: float, unstable: bool = False) -> dict:
        return {"tier": "local", "variant": f"triton_onnx_dynbatch+max_queue_delay_us={delay}", "load": load,
                "throughput_img_s": img_s, "latency_p99_ms": p99, "unstable": unstable}

    slo = pd.DataFrame([summary(500, 77.0), summary(10000, 71.5)])
    trials = [trial(500, "c12", 77.0, 150.0), trial(10000, "c12", 79.5, 160.0), trial(10000, "c13", 71.5, 190.0),
              trial(10000, "c16", 90.0, 250.0), trial(500, "c8", 95.0, 120.0, unstable=True)]

    def deployed(rows: list[dict]) -> str:
        doc = Document("report")
        deploy_section(doc, SimpleNamespace(slo=slo, sustained=pd.DataFrame(rows)), {})
        return doc.to_markdown()

    text = deployed(trials)
    assert "**Deploy triton_onnx_dynbatch (max_queue_delay_us=500) on local:" in text
    # c16 broke the target and c8 was unstable: the fastest stable trial within it is the other candidate's c12.
    assert ("the search's fastest single trial within p99 ≤ 200 ms, triton_onnx_dynbatch+max_queue_delay_us=10000 at "
            "c12 (79.5 img/s, p99 160.0 ms), is not the candidate named here: at its highest load within the target "
            "that candidate served 71.5 img/s.") in text
    assert "where triton_onnx_dynbatch+max_queue_delay_us=500 served 77.0 img/s. The two trials are 3.2 % apart" in text
    assert "fastest single trial" not in deployed([trials[0], trials[2]]), "the winner's own trial is the fastest"


def test_the_report_says_what_to_deploy(searched) -> None:
    uri, folder = searched
    published = make_report(uri, "tierbench", syn.SEARCH_SWEEP_ID, folder / "runs", ReportOptions())
    text = published.markdown.read_text()
    assert "# Deploy this" in text
    # rtx4090: 0.05/240 = $0.000208 per 1k; a100's best 0.1/400 = $0.00025 (1.20x); rtx4090's start 0.05/150 (1.60x)
    assert ("**Deploy triton_onnx_dynbatch (instance_count=2, max_queue_delay_us=500) on rtx4090: $0.000208 per 1k "
            "images at 240.0 img/s within p99 ≤ 50 ms; 1.20× cheaper than the runner-up, a100 ($0.00025); 1.60× "
            "cheaper than its default settings.**") in text
    assert "| a100 | triton_onnx_dynbatch/grpc/tensor/b1 | instance_count=2, max_queue_delay_us=2000 | 400.0 |" in text


def test_the_fastapi_service_and_torchserve_are_searched_like_the_others() -> None:
    spaces = ["experiment.backends=[fastapi,torchserve]", "experiment.protocols=[http]",
              "+experiment.search.space.fastapi={workers: [1, 2]}",
              "+experiment.search.space.torchserve={batch_size: [1, 4], max_batch_delay_ms: [2, 10], workers: [1, 2]}"]
    cfg = load_config([*CHEAPEST, *spaces])
    validate(cfg)
    assert space_of(cfg, "torchserve") == {"batch_size": [1, 4], "max_batch_delay_ms": [2, 10], "workers": [1, 2]}
    name = add_candidate(cfg, "torchserve", {"batch_size": 4, "max_batch_delay_ms": 10, "workers": 2})
    assert name == "torchserve+batch_size=4+max_batch_delay_ms=10+workers=2"
    candidate = cfg.backends[name]
    assert (candidate.batch_size, candidate.max_batch_delay_ms, candidate.workers, candidate.family) == (
        4, 10, 2, "torchserve")
    assert "backends.torchserve.max_batch_delay_ms=0 is not allowed" in refused(
        *spaces[:2], "+experiment.search.space.torchserve={max_batch_delay_ms: [0, 5]}")
    assert "not a setting the search varies for fastapi" in refused(
        *spaces[:2], "+experiment.search.space.fastapi={half: [true, false]}")
