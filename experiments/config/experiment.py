"""The experiment's part of the config tree (`experiment`, conf/experiment/): the trial matrix and how each trial is
measured, as typed schemas (registered by `experiments.config.schema`, whose namespace holds them too), each checking
its own values (`experiments.config.checks`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from experiments.config.checks import Checked
from experiments.config.choices import LoadEngine, LoadMode, TrialMatrix
from experiments.config.errors import refuse
from experiments.config.inputs import AccuracyConfig, InputsConfig
from experiments.config.search import SearchConfig
from experiments.config.stacks import Stack
from experiments.config.trace import check_trace
from experiments.config.workloads import check_workload
from serving.protocols import PROTOCOLS
from serving.workloads.generative.config import PromptsConfig
from serving.workloads.registry import workloads

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


@dataclass
class StabilityConfig(Checked):
    """perf_analyzer's rule: repeat windows until the last `windows` agree within `percent` on throughput and
    on the chosen latency percentile (at most `max_windows`)."""

    percent: float = 10.0  # how far apart (%) the agreeing windows may be on throughput and the latency percentile
    windows: int = 3  # how many of the last windows must agree
    max_windows: int = 10  # stop there, agreed or not (the trial is then tagged stable=false)
    latency_percentile: int = 95  # the latency percentile the windows must agree on
    # each window holds at least this many completed requests: one that holds fewer goes on into the next, measured
    # as one longer window (up to 8 x window_s, or 3 x the warm-up's slowest request), before windows are compared
    # (LoadGen's minimum query count); 0: every window is window_s long unless no request ended in it
    min_requests: int = 0

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        if self.percent <= 0 or self.windows < 1 or self.max_windows < self.windows:
            return [refuse(key, dataclasses.asdict(self), "percent > 0, windows >= 1, max_windows >= windows")]
        if not 0 < self.latency_percentile < 100:
            return [refuse(f"{key}.latency_percentile", self.latency_percentile, "between 0 and 100")]
        if not (isinstance(self.min_requests, int) and self.min_requests >= 0):
            return [refuse(f"{key}.min_requests", self.min_requests, "a whole number >= 0 (0: windows of window_s "
                           "whatever they hold; e.g. 20, so that one request more or less moves a window's throughput "
                           "by 5 % at most)")]
        return []


@dataclass
class SloConfig(Checked):
    """Find the highest load whose p99 stays within `p99_ms` (null: no search); a generative sweep's targets are its
    time to first token and time per output token (`ttft_p99_ms`, `tpot_p99_ms`)."""

    p99_ms: float | None = None  # the p99 target (ms); null: no search
    # Generative: the time to first token's p99 target (ms), and each request's bound for goodput; null: none
    ttft_p99_ms: float | None = None
    # Generative: the time per output token's p99 target (ms), and each request's bound for goodput; null: none
    tpot_p99_ms: float | None = None
    # A request answered later than this (ms) is not good: goodput counts the requests answered well within it
    # (null: within p99_ms, where set; with neither, no goodput)
    deadline_ms: float | None = None
    # The search also keeps goodput at least this share of the requests offered (e.g. 0.99: at most 1 % failed or
    # late); null: the p99 rule alone
    min_goodput_share: float | None = None
    max_concurrency: int = 64  # the search's highest concurrency (closed loop)
    max_rate: float = 2000.0  # the search's highest request rate, req/s (open loop)

    def targets(self, keys: Iterable[str] | None = None) -> dict[str, float]:
        """The latency targets set among `keys` (a workload's `slo_targets`; None: every one), {key: ms}: what its SLO
        search keeps (the deadline is goodput's, not a target of its own)."""
        keys = [f.name for f in fields(self)] if keys is None else keys
        return {key: getattr(self, key) for key in keys if key.endswith("p99_ms") and getattr(self, key) is not None}

    @property
    def searched(self) -> bool:
        """A latency target is set, so the SLO search runs (each workload refuses another's targets)."""
        return bool(self.targets())

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """Its targets and goodput rule (which targets a workload reads: `experiments.config.workloads`)."""
        if self.p99_ms is not None and self.p99_ms <= 0:
            return [refuse(f"{key}.p99_ms", self.p99_ms, "a latency target > 0 ms, or null for no SLO search")]
        if self.deadline_ms is not None and not self.deadline_ms > 0:
            return [refuse(f"{key}.deadline_ms", self.deadline_ms, f"a per-request deadline > 0 ms for goodput, or "
                                                                   f"null (goodput within {key}.p99_ms)")]
        if self.min_goodput_share is not None and not 0 < self.min_goodput_share <= 1:
            return [refuse(f"{key}.min_goodput_share", self.min_goodput_share, "the share of the offered requests the "
                           "SLO search keeps answered well within the deadline, in (0, 1], e.g. 0.99; or null (p99 "
                           "alone)")]
        if self.min_goodput_share is not None and not self.searched:
            return [refuse(f"{key}.min_goodput_share", self.min_goodput_share, f"it is a rule of the SLO search: set "
                           f"{key}.p99_ms too (the deadline is {key}.deadline_ms, else that target); a generative "
                           f"sweep's targets are {key}.ttft_p99_ms and/or {key}.tpot_p99_ms")]
        return []


@dataclass
class ArrivalsConfig(Checked):
    """The open-loop shapes beyond constant and Poisson (experiment.load_mode; docs/traffic.md)."""

    cv: float = 3.0  # gamma: the gaps' coefficient of variation (1: Poisson; above: burstier)
    burst_on_s: float = 0.25  # bursts: seconds of arrivals at the burst rate, ...
    burst_off_s: float = 0.75  # ... then seconds of none, over and over; the trial's rate is the mean over both
    ramp_steps: int = 8  # ramp: the rate rises in this many steps, one measurement window each, ...
    ramp_start: float = 0.125  # ... from this share of the trial's rate (its peak) to all of it

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """The shape of the experiment's load mode (gamma, bursts, ramp): values that give a schedule; the others'
        are not read."""
        mode = cfg.experiment.load_mode
        if mode == LoadMode.GAMMA and not self.cv > 0:
            return [refuse(f"{key}.cv", self.cv, "the gaps' coefficient of variation, > 0 (1: Poisson; 3: bursty)")]
        if mode == LoadMode.BURSTS:
            for name in ("burst_on_s", "burst_off_s"):
                if not getattr(self, name) >= 0.01:
                    return [refuse(f"{key}.{name}", getattr(self, name), "seconds >= 0.01")]
        if mode == LoadMode.RAMP:
            if not (isinstance(self.ramp_steps, int) and self.ramp_steps >= 2):
                return [refuse(f"{key}.ramp_steps", self.ramp_steps, "a whole number of steps >= 2, one measurement "
                                                                     "window each")]
            if not 0 < self.ramp_start < 1:
                return [refuse(f"{key}.ramp_start", self.ramp_start, "the first step's share of the trial's rate, "
                                                                     "between 0 and 1 (e.g. 0.125)")]
        return []


@dataclass
class ExperimentConfig(Checked):
    """The trial matrix and how each trial is measured."""

    name: str = MISSING  # the experiment's name, logged with its trials
    # What is sent and in what unit it is priced (serving/workloads/): image (images, $ per 1k images) | generative
    # (conversations to an OpenAI-compatible server, $ per 1M tokens). The model must be of it (conf/model/)
    workload: str = "image"
    backends: list[str] = field(default_factory=list)  # entries of conf/backends/ to measure (`backends.<entry>`)
    # http | grpc; for Triton with the client on the server's machine also http_shm, grpc_shm (system shared memory)
    # and http_cuda_shm, grpc_cuda_shm (GPU)
    protocols: list[str] = field(default_factory=list)
    # image: tensor | jpeg | jpeg_base64 (base64 JPEGs in JSON); generative: chat_stream | completions_stream (every
    # token timed) | chat | completions (answered whole)
    input_formats: list[str] = field(default_factory=list)
    # images per request, each at most model.max_batch_size (generative: [1], one conversation per request)
    batch_sizes: list[int] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)  # closed loop: request loops in flight, one trial each
    # Only these stacks, `variant/protocol/input_format` (e.g. fastapi/http/jpeg_base64), instead of every combination
    # of backends x protocols x input formats; each part must be listed in its key above.
    stacks: list[str] = field(default_factory=list)
    # TrialMatrix: full (every batch size at every load) | axes (batch sizes at the lowest load, loads at the
    # smallest batch size: the studies' serial-latency and concurrent-throughput tables)
    matrix: str = "full"
    # LoadMode: closed, `concurrency` request loops; constant | poisson | gamma | bursts, open loop at each of
    # `request_rates` (req/s, the mean); ramp, rising to each of `request_rates` over `arrivals.ramp_steps` windows;
    # trace, open loop following `trace`, each of `request_rates` its peak (docs/traffic.md, docs/trace-replay.md)
    load_mode: str = "closed"
    arrivals: ArrivalsConfig = field(default_factory=ArrivalsConfig)  # the shapes of gamma, bursts and ramp
    request_rates: list[float] = field(default_factory=list)  # open loop: req/s, one trial each (trace: the peak)
    # load_mode=trace: a CSV of arrival times (header arrival_s) or of requests/s per step (header rate_per_s), e.g.
    # conf/traces/diurnal_example.csv (SYNTHETIC). Its whole span is replayed in each window_s, looped; its busiest
    # step at the trial's rate.
    trace: str | None = None
    max_in_flight: int = 1024  # open loop: requests outstanding at most; later ones are sent late (late_requests)
    # Warm-up ends once both are reached; its requests are dropped from the measurement.
    warmup_requests: int = 10
    warmup_s: float = 1.0  # seconds of warm-up (with warmup_requests, both must pass)
    window_s: float = 5.0  # length of one measurement window, seconds
    request_timeout_s: float = 60.0  # a request not answered within it fails (outcome `timeout`)
    # The share of a trial's requests that may fail (an error status, a timeout, a lost connection:
    # serving.clients.outcomes) before the trial fails; its figures are kept either way, errors by class included
    max_error_rate: float = 0.01
    # Longest a trial may take from load start to the end of its window; beyond it the trial fails.
    trial_timeout_s: float = 600.0
    # A trial whose server failed under it (a crashed or unhealthy process: the Python backend's stub declares
    # itself unhealthy when starved of CPU for a second, also when the server answered the trial's other requests)
    # is measured again this many times on a fresh server. The
    # failed attempt stays logged, tagged `retried`; the new one carries `attempt` and the earlier reason.
    trial_retries: int = 1
    # Measure each trial this many times (1: once). With more, the trial's figures pool its repeats and each gets a
    # 95 % interval (docs/confidence-intervals.md); every repeat is an MLflow run nested under its trial's run.
    repeats: int = 1
    # Each repeat after the first on a fresh server process (stopped and started again): its start-up and memory
    # layout become part of the spread. Off: every repeat on the server already running.
    repeat_fresh_server: bool = False
    stability: StabilityConfig = field(default_factory=StabilityConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    # Client actors share a trial's load, each with its own async client and connections. 0: automatic, one
    # actor per `client_concurrency_per_actor` loops, more when an actor's CPU passes `client_cpu_limit`.
    client_actors: int = 0
    max_client_actors: int = 4  # automatic actors stop here
    client_concurrency_per_actor: int = 16  # request loops per actor when client_actors is automatic
    client_cpu_limit: float = 0.8  # share of a core an actor may use before another is added (else client_bound)
    client_num_cpus: float = 0.1  # CPUs each client actor asks of Ray
    # LoadEngine: what sends the requests. auto: the compiled engine (C, experiments/measure/engine/loadgen.c) wherever
    # it builds and speaks the trial's protocol, else the Python client; compiled: only it (a trial it cannot measure
    # is refused); python: the actors' asyncio client. Every trial records the engine that measured it.
    load_engine: str = "auto"
    inputs: InputsConfig = field(default_factory=InputsConfig)  # the images requests carry (docs/inputs.md)
    # the conversations generative requests carry and their lengths (docs/generative.md)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)  # top-1 against the reference, and its bound

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """The matrix and how trials are measured, of the experiment's workload (its model, formats and backends:
        `experiments.config.workloads`), before its parts (the load's shape, the inputs: what applies follows from
        here)."""
        problems = _one_or_more(f"{key}.backends", self.backends, sorted(cfg.backends)) or check_workload(cfg)
        if problems:
            return problems
        workload = workloads()[self.workload]
        problems = (_one_or_more(f"{key}.protocols", self.protocols, PROTOCOLS)
                    or _one_or_more(f"{key}.input_formats", self.input_formats,
                                    [str(f) for f in workload.request_formats])
                    or self._check_stacks(key))
        if problems:
            return problems
        if self.matrix not in list(TrialMatrix):
            return [refuse(f"{key}.matrix", self.matrix, f"choose from {[str(m) for m in TrialMatrix]} (full: every "
                           "batch size at every load; axes: batch sizes at the lowest load, loads at the smallest "
                           "batch size)")]
        if workload.image_model:  # the batch sizes the model is exported for
            problems = _positive_ints(f"{key}.batch_sizes", self.batch_sizes, cfg.model.max_batch_size,
                                      "model.max_batch_size")
            if problems:
                return problems
        if self.load_mode not in list(LoadMode):
            return [refuse(f"{key}.load_mode", self.load_mode, f"choose from {[str(m) for m in LoadMode]}")]
        problems = check_trace(self) or self._check_loads(key)
        if problems:
            return problems
        if self.load_engine not in list(LoadEngine):
            return [refuse(f"{key}.load_engine", self.load_engine, f"choose from {[str(e) for e in LoadEngine]}")]
        for name in ("window_s", "warmup_s", "request_timeout_s", "trial_timeout_s", "client_num_cpus"):
            if getattr(self, name) <= 0:
                return [refuse(f"{key}.{name}", getattr(self, name), "must be > 0")]
        for name in ("warmup_requests", "max_client_actors", "client_concurrency_per_actor", "max_in_flight"):
            if getattr(self, name) <= 0:
                return [refuse(f"{key}.{name}", getattr(self, name), "must be a positive integer")]
        if self.trial_retries < 0:
            return [refuse(f"{key}.trial_retries", self.trial_retries, "0 (a failed trial stays failed) or a positive "
                                                                       "number")]
        if self.repeats < 1:
            return [refuse(f"{key}.repeats", self.repeats, f"a whole number >= 1 (1: measure each trial once; e.g. "
                                                           f"{key}.repeats=3 for 95 % intervals)")]
        if self.client_actors < 0:
            return [refuse(f"{key}.client_actors", self.client_actors, "0 (automatic) or a positive number of actors")]
        if not 0 <= self.max_error_rate <= 1:
            return [refuse(f"{key}.max_error_rate", self.max_error_rate, "the share of requests that may fail before "
                                                                         "a trial fails, 0..1 (e.g. 0.01; 0: any "
                                                                         "error fails it)")]
        return []

    def _check_stacks(self, key: str) -> list[str]:
        """Each `variant/protocol/input_format` of `stacks` names a listed backend, protocol and format."""
        for text in self.stacks:
            try:
                stack = Stack.parse(text)
            except ValueError:
                return [refuse(f"{key}.stacks", text, "write backend_variant/protocol/input_format, e.g. "
                                                      "fastapi/http/jpeg_base64")]
            for name, value in (("backends", stack.variant), ("protocols", stack.protocol),
                                ("input_formats", stack.input_format)):
                if value not in getattr(self, name):
                    return [refuse(f"{key}.stacks", text, f"{value!r} is not in {key}.{name} "
                                                          f"({list(getattr(self, name))}): list it there too")]
        return []

    def _check_loads(self, key: str) -> list[str]:
        """Closed loop: positive numbers of request loops; open loop: positive rates in requests/s. A ramp is
        measured over its steps, so neither an SLO search nor the stability rule applies to it."""
        mode = LoadMode(self.load_mode)
        if not mode.open_loop:
            return _positive_ints(f"{key}.concurrency", self.concurrency)
        if not self.request_rates:
            return [refuse(f"{key}.request_rates", [], f"open loop ({mode}) needs rates in requests/s, e.g. "
                                                       f"{key}.request_rates=[10,50]")]
        for rate in self.request_rates:
            if rate <= 0:
                return [refuse(f"{key}.request_rates", rate, "every rate must be > 0 requests/s")]
        target = next(iter(self.slo.targets().items()), None)
        if mode is LoadMode.RAMP and target is not None:
            return [refuse(f"{key}.slo.{target[0]}", target[1], "a ramp is one trial rising through the loads, which "
                           "is what the SLO search does step by step: search with load_mode=poisson, or ramp without "
                           f"{key}.slo.{target[0]} (with {key}.slo.deadline_ms for its goodput)")]
        return []


def highest_load(exp: ExperimentConfig) -> tuple[int, float]:
    """The most requests in flight (closed loop; 0: none) and per second (open loop; 0: none) the experiment asks of
    a server, its SLO search's limits included."""
    mode = LoadMode(exp.load_mode)
    search = exp.slo.searched
    if mode.open_loop:
        return 0, max([*exp.request_rates, exp.slo.max_rate if search else 0.0], default=0.0)
    return max([*exp.concurrency, exp.slo.max_concurrency if search else 0], default=0), 0.0


def _one_or_more(key: str, values: Any, allowed: tuple[str, ...] | list[str]) -> list[str]:
    if not values:
        return [refuse(key, list(values or []), f"give at least one of {list(allowed)}, e.g. {key}=[{allowed[0]}]")]
    for value in values:
        if value not in allowed:
            return [refuse(key, value, f"choose from {list(allowed)}")]
    return []


def _positive_ints(key: str, values: Any, upper: int | None = None, upper_key: str = "") -> list[str]:
    if not values:
        return [refuse(key, list(values or []), f"give at least one positive integer, e.g. {key}=[1]")]
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return [refuse(key, value, "every entry must be a positive integer")]
        if upper is not None and value > upper:
            return [refuse(key, value, f"must not exceed {upper_key}={upper}")]
    return []
