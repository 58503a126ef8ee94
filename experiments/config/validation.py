"""Checks a composed config before anything starts: one clear error naming the key, the value and the fix.

Types and key names are the schemas' job (`experiments.config.schema`, when the config is composed); what a type
cannot say (allowed names, ranges, settings that need each other) is checked here, backend settings by their own
classes (`BackendSettings.check`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from experiments.config.capacity import check_capacity
from experiments.config.choices import ClientPlacement, LoadEngine, LoadMode, TrialMatrix
from experiments.config.errors import ConfigError
from experiments.config.inputs import check_accuracy, check_inputs
from experiments.config.model_check import check_model
from experiments.config.owned import validate_owned
from experiments.config.prices import validate_prices
from experiments.config.schema import (
    CLUSTER_SWITCHES,
    CeilingConfig,
    ClusterConfig,
    CrosscheckConfig,
    ExperimentConfig,
    TierbenchConfig,
)
from experiments.config.search import check_search
from experiments.config.shares import tenants, validate_share
from experiments.config.stacks import Stack
from experiments.config.trace import check_trace
from experiments.config.workloads import check_prompts, check_workload
from serving.protocols import PROTOCOLS


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _check_list(key: str, values: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if not values:
        _fail(key, list(values or []), f"give at least one of {list(allowed)}, e.g. {key}=[{allowed[0]}]")
    for value in values:
        if value not in allowed:
            _fail(key, value, f"choose from {list(allowed)}")


def _check_positive_ints(key: str, values: Any, upper: int | None = None, upper_key: str = "") -> None:
    if not values:
        _fail(key, list(values or []), f"give at least one positive integer, e.g. {key}=[1]")
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            _fail(key, value, "every entry must be a positive integer")
        if upper is not None and value > upper:
            _fail(key, value, f"must not exceed {upper_key}={upper}")


def _check_identity(tier: Any) -> None:
    """A GPU tier names its GPU exactly; its memory bounds, where given, are a range; a share of a card (a MIG slice)
    says its share and its card's tier."""
    if tier.requires_gpu and not tier.gpu_names:
        _fail("gpu.gpu_names", [], "a GPU tier names its GPU: its NVML names as nvidia-smi --query-gpu=name prints "
                                   "them (or requires_gpu=false for a CPU tier)")
    if tier.cpus is not None and (tier.requires_gpu or not isinstance(tier.cpus, int) or tier.cpus <= 0):
        _fail("gpu.cpus", tier.cpus, "a CPU tier's logical CPUs, a positive integer, with requires_gpu=false (or null)")
    memory = list(tier.gpu_memory_gib)
    if memory and (len(memory) != 2 or not 0 < memory[0] <= memory[1]):
        _fail("gpu.gpu_memory_gib", memory, "give [low, high] in GiB with 0 < low <= high, or [] for any")
    validate_share(tier)


def _check_tenancy(cfg: TierbenchConfig) -> None:
    """A shared card's tier starts its servers side by side on the card: each one tierbench's, each fitting its share
    of the GPU Ray schedules."""
    count = tenants(cfg.gpu)
    if count == 1:
        return
    names = [n for n in cfg.experiment.backends if n in cfg.backends]
    foreign = [n for n in names if not cfg.backends[n].launches_server]
    if foreign:
        _fail("experiment.backends", foreign, f"tier {cfg.gpu.name} is a card shared by {count} servers tierbench "
                                              "starts on it, and an endpoint is a server it does not start: measure "
                                              "the endpoint on a whole card's tier, or drop it here")
    if not cfg.gpu.requires_gpu:
        return
    for name in names:
        ask = cfg.backends[name].gpu_ask()
        if ask is not None and ask[1] * count > 1 + 1e-9:
            _fail(f"backends.{name}.{ask[0]}", ask[1], f"each of the {count} servers sharing the card on tier "
                                                       f"{cfg.gpu.name} asks Ray for this share of it (all its "
                                                       f"replicas together): at most "
                                                       f"1/{count} (e.g. backends.{name}.{ask[0]}={1 / count:.4g})")


def validate(cfg: TierbenchConfig) -> None:
    """Raise ConfigError on the first value that is not allowed (`cfg` is typed: `experiments.config.typed`)."""
    exp = cfg.experiment
    price = cfg.gpu.price_per_hour_usd
    if price is None or not isinstance(price, int | float) or price < 0:
        _fail("gpu.price_per_hour_usd", price, "set a price >= 0 in USD per hour for this tier")
    validate_prices(cfg.gpu)
    _check_identity(cfg.gpu)
    validate_owned(cfg.gpu.owned)
    _check_list("experiment.backends", exp.backends, sorted(cfg.backends))
    workload = check_workload(cfg)
    _check_list("experiment.protocols", exp.protocols, PROTOCOLS)
    _check_list("experiment.input_formats", exp.input_formats, [str(f) for f in workload.request_formats])
    _check_stacks(exp)
    if exp.matrix not in list(TrialMatrix):
        _fail("experiment.matrix", exp.matrix, f"choose from {[str(m) for m in TrialMatrix]} (full: every batch size "
              "at every load; axes: batch sizes at the lowest load, loads at the smallest batch size)")
    if workload.image_model:
        _check_positive_ints("experiment.batch_sizes", exp.batch_sizes, cfg.model.max_batch_size,
                             "model.max_batch_size")
    if exp.load_mode not in list(LoadMode):
        _fail("experiment.load_mode", exp.load_mode, f"choose from {[str(m) for m in LoadMode]}")
    check_trace(exp)
    _check_loads(LoadMode(exp.load_mode), exp)
    _check_engine(exp)
    if workload.image_model:
        check_inputs(exp.inputs)
        check_accuracy(exp.accuracy)
    for key in ("window_s", "warmup_s", "request_timeout_s", "trial_timeout_s", "client_num_cpus"):
        if getattr(exp, key) <= 0:
            _fail(f"experiment.{key}", getattr(exp, key), "must be > 0")
    if cfg.clients.placement not in list(ClientPlacement):
        _fail("clients.placement", cfg.clients.placement, f"choose from {[str(p) for p in ClientPlacement]}")
    for key in ("warmup_requests", "max_client_actors", "client_concurrency_per_actor", "max_in_flight"):
        if getattr(exp, key) <= 0:
            _fail(f"experiment.{key}", getattr(exp, key), "must be a positive integer")
    if exp.trial_retries < 0:
        _fail("experiment.trial_retries", exp.trial_retries, "0 (a failed trial stays failed) or a positive number")
    if exp.repeats < 1:
        _fail("experiment.repeats", exp.repeats, "a whole number >= 1 (1: measure each trial once; e.g. "
              "experiment.repeats=3 for 95 % intervals)")
    if exp.client_actors < 0:
        _fail("experiment.client_actors", exp.client_actors, "0 (automatic) or a positive number of actors")
    stability = exp.stability
    if stability.percent <= 0 or stability.windows < 1 or stability.max_windows < stability.windows:
        _fail("experiment.stability", dataclasses.asdict(stability),
              "percent > 0, windows >= 1, max_windows >= windows")
    if not 0 < stability.latency_percentile < 100:
        _fail("experiment.stability.latency_percentile", stability.latency_percentile, "between 0 and 100")
    if not (isinstance(stability.min_requests, int) and stability.min_requests >= 0):
        _fail("experiment.stability.min_requests", stability.min_requests,
              "a whole number >= 0 (0: windows of window_s whatever they hold; e.g. 20, so that one request more "
              "or less moves a window's throughput by 5 % at most)")
    if exp.slo.p99_ms is not None and exp.slo.p99_ms <= 0:
        _fail("experiment.slo.p99_ms", exp.slo.p99_ms, "a latency target > 0 ms, or null for no SLO search")
    if exp.slo.deadline_ms is not None and not exp.slo.deadline_ms > 0:
        _fail("experiment.slo.deadline_ms", exp.slo.deadline_ms, "a per-request deadline > 0 ms for goodput, or null "
                                                                 "(goodput within experiment.slo.p99_ms)")
    if exp.slo.min_goodput_share is not None and not 0 < exp.slo.min_goodput_share <= 1:
        _fail("experiment.slo.min_goodput_share", exp.slo.min_goodput_share, "the share of the offered requests the "
              "SLO search keeps answered well within the deadline, in (0, 1], e.g. 0.99; or null (p99 alone)")
    if exp.slo.min_goodput_share is not None and exp.slo.p99_ms is None:
        _fail("experiment.slo.min_goodput_share", exp.slo.min_goodput_share, "it is a rule of the SLO search: set "
              "experiment.slo.p99_ms too (the deadline is experiment.slo.deadline_ms, else that target)")
    if not 0 <= exp.max_error_rate <= 1:
        _fail("experiment.max_error_rate", exp.max_error_rate, "the share of requests that may fail before a trial "
                                                               "fails, 0..1 (e.g. 0.01; 0: any error fails it)")
    check_capacity(cfg)
    if cfg.telemetry.sample_hz <= 0:
        _fail("telemetry.sample_hz", cfg.telemetry.sample_hz, "must be > 0 (NVML samples per second, e.g. 20)")
    _check_ceiling(cfg.ceiling)
    _settle_cluster_switches(cfg)
    for name in exp.backends:
        _check_backend(cfg, name)
    _check_tenancy(cfg)
    check_search(cfg)
    _check_cluster(cfg.cluster)
    _check_crosscheck(cfg.crosscheck)
    # last: it loads and runs the model the user brings, or builds the prompts with the model's tokenizer
    if workload.image_model:
        check_model(cfg.model)
    else:
        check_prompts(cfg)


def _check_stacks(exp: ExperimentConfig) -> None:
    """Each `variant/protocol/input_format` of experiment.stacks names a listed backend, protocol and format."""
    for text in exp.stacks:
        try:
            stack = Stack.parse(text)
        except ValueError:
            _fail("experiment.stacks", text, "write backend_variant/protocol/input_format, e.g. "
                  "fastapi/http/jpeg_base64")
        for key, value in (("backends", stack.variant), ("protocols", stack.protocol),
                           ("input_formats", stack.input_format)):
            if value not in getattr(exp, key):
                _fail("experiment.stacks", text, f"{value!r} is not in experiment.{key} ({list(getattr(exp, key))}): "
                      "list it "
                      "there too")


def _check_loads(mode: LoadMode, exp: ExperimentConfig) -> None:
    """Closed loop: positive numbers of request loops; open loop: positive rates in requests/s."""
    if not mode.open_loop:
        _check_positive_ints("experiment.concurrency", exp.concurrency)
        return
    if not exp.request_rates:
        _fail("experiment.request_rates", [], f"open loop ({mode}) needs rates in requests/s, e.g. "
              "experiment.request_rates=[10,50]")
    for rate in exp.request_rates:
        if rate <= 0:
            _fail("experiment.request_rates", rate, "every rate must be > 0 requests/s")
    _check_arrivals(mode, exp)


def _check_arrivals(mode: LoadMode, exp: ExperimentConfig) -> None:
    """The shape of a gamma, bursts or ramp load: values that give a schedule; a ramp is measured over its steps, so
    neither an SLO search nor the stability rule applies to it."""
    arrivals = exp.arrivals
    if mode is LoadMode.GAMMA and not arrivals.cv > 0:
        _fail("experiment.arrivals.cv", arrivals.cv, "the gaps' coefficient of variation, > 0 (1: Poisson; 3: bursty)")
    if mode is LoadMode.BURSTS:
        for key in ("burst_on_s", "burst_off_s"):
            if not getattr(arrivals, key) >= 0.01:
                _fail(f"experiment.arrivals.{key}", getattr(arrivals, key), "seconds >= 0.01")
    if mode is LoadMode.RAMP:
        if not (isinstance(arrivals.ramp_steps, int) and arrivals.ramp_steps >= 2):
            _fail("experiment.arrivals.ramp_steps", arrivals.ramp_steps, "a whole number of steps >= 2, one "
                                                                         "measurement window each")
        if not 0 < arrivals.ramp_start < 1:
            _fail("experiment.arrivals.ramp_start", arrivals.ramp_start, "the first step's share of the trial's "
                                                                         "rate, between 0 and 1 (e.g. 0.125)")
        if exp.slo.p99_ms is not None:
            _fail("experiment.slo.p99_ms", exp.slo.p99_ms, "a ramp is one trial rising through the loads, which is "
                  "what the SLO search does step by step: search with load_mode=poisson, or ramp without "
                  "experiment.slo.p99_ms (with experiment.slo.deadline_ms for its goodput)")


def _check_engine(exp: ExperimentConfig) -> None:
    if exp.load_engine not in list(LoadEngine):
        _fail("experiment.load_engine", exp.load_engine, f"choose from {[str(e) for e in LoadEngine]}")


def clients_only(cfg: TierbenchConfig) -> bool:
    """Every backend of the experiment is a server tierbench does not start (an endpoint): the tier's node only hosts
    the clients, and this machine may stand for the tier."""
    return all(not cfg.backends[name].launches_server for name in cfg.experiment.backends if name in cfg.backends)


def highest_load(exp: ExperimentConfig) -> tuple[int, float]:
    """The most requests in flight (closed loop; 0: none) and per second (open loop; 0: none) the experiment asks of
    a server, its SLO search's limits included."""
    mode = LoadMode(exp.load_mode)
    search = exp.slo.p99_ms is not None
    if mode.open_loop:
        return 0, max([*exp.request_rates, exp.slo.max_rate if search else 0.0], default=0.0)
    return max([*exp.concurrency, exp.slo.max_concurrency if search else 0], default=0), 0.0


def _check_backend(cfg: TierbenchConfig, name: str) -> None:
    """The entry's typed settings, the class they name, and the settings' own checks, before any server starts."""
    from hydra.utils import get_class

    settings = cfg.backends[name]
    try:
        get_class(settings._target_)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bad _target_
        raise ConfigError(f"backends.{name}._target_={settings._target_!r} cannot be imported ({exc}): name a "
                          "Backend class, e.g. serving.triton.backend.TritonBackend") from None
    problems = [*settings.check(name, cfg.model, cfg.cluster.switches()),
                *settings.refuse_batch_sizes(name, list(cfg.experiment.batch_sizes)),
                *settings.refuse_loads(name, *highest_load(cfg.experiment))]
    if problems:
        raise ConfigError("; ".join(problems))


def _settle_cluster_switches(cfg: TierbenchConfig) -> None:
    """A cluster switch left null (`cluster.serve_direct_ingress`) is turned on when a backend of the experiment
    needs it (`BackendSettings.cluster_needs`), else off, before anything starts."""
    needs: dict[str, bool] = {}
    for name in cfg.experiment.backends:
        if name in cfg.backends:
            for key, value in cfg.backends[name].cluster_needs().items():
                needs[key] = needs.get(key, False) or value
    for key in CLUSTER_SWITCHES:
        if getattr(cfg.cluster, key) is None:
            setattr(cfg.cluster, key, needs.get(key, False))


def _check_cluster(cluster: ClusterConfig) -> None:
    from experiments.config.autoscaling import load_autoscaling

    for key in ("lease_timeout_s", "scale_up_timeout_s", "schedule_timeout_s"):
        if getattr(cluster, key) <= 0:
            _fail(f"cluster.{key}", getattr(cluster, key), "a time in seconds > 0")
    if cluster.autoscaling_config:
        load_autoscaling(str(cluster.autoscaling_config))  # the file exists and names node types


def _check_ceiling(ceiling: CeilingConfig) -> None:
    for key in ("min_time_s", "timeout_s"):
        if getattr(ceiling, key) <= 0:
            _fail(f"ceiling.{key}", getattr(ceiling, key),
                  "a time in seconds > 0 (or ceiling.enabled=false: no ceiling)")
    if ceiling.min_calls < 1:
        _fail("ceiling.min_calls", ceiling.min_calls, "a positive number of calls, e.g. 5")


def _check_crosscheck(check: CrosscheckConfig) -> None:
    if check.images < 1:
        _fail("crosscheck.images", check.images, "must be a positive integer")
    for numerics in ("fp32", "fp16", "bf16", "int8"):
        if numerics not in check.tolerances:
            _fail(f"crosscheck.tolerances.{numerics}", None, "give max_abs_diff and min_top1_agreement")
        tolerance = check.tolerances[numerics]
        if tolerance.max_abs_diff < 0:
            _fail(f"crosscheck.tolerances.{numerics}.max_abs_diff", tolerance.max_abs_diff, "must be >= 0")
        if not 0 <= tolerance.min_top1_agreement <= 1:
            _fail(f"crosscheck.tolerances.{numerics}.min_top1_agreement", tolerance.min_top1_agreement,
                  "must be a fraction in [0, 1]")
