"""Traffic from a trace (`experiment.load_mode=trace`, `experiment.trace=<csv>`): the file read and checked once,
before any server starts, and the shape the replay follows (docs/trace-replay.md).

Two formats, told apart by the header (the first line that is not a `#` comment):
- `arrival_s`: one request per row, its arrival time in seconds, in order (unsorted is refused: a trace that is out
  of order was cut or merged wrongly). Counted per second of the recording, from the first arrival's second.
- `rate_per_s`: one row per step of the recording (a second, a minute: any fixed length), its requests/s.

Either becomes a rate per step. The replay keeps only its shape: the whole recording is compressed (or stretched)
into one measurement window (`experiment.window_s`) and looped for as long as the trial runs, so every window
replays it once, in full; its level is set by the trial's request rate (`experiment.request_rates`), which is the
replay's peak: every step's rate x (request rate / the busiest step's rate). Kept free of numpy and pandas, so the
config checks load fast; the arrivals are drawn in `experiments.measure.replay`."""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.config.checks import refused_by
from experiments.config.errors import not_allowed, refuse

if TYPE_CHECKING:
    from experiments.config.schema import ExperimentConfig

KEY = "experiment.trace"
ARRIVALS, RATES = "arrival_s", "rate_per_s"
EXAMPLE = "conf/traces/diurnal_example.csv"


@dataclass(frozen=True)
class Trace:
    """A recording's requests/s per step (`rates`), its format, and a digest of the file (part of a trial's identity:
    another trace is another measurement)."""

    path: str
    kind: str  # ARRIVALS | RATES
    rates: tuple[float, ...]
    sha256: str

    @property
    def peak(self) -> float:
        return max(self.rates)

    @property
    def mean_to_peak(self) -> float:
        """The mean rate over the peak rate: a replay at peak R req/s offers R x this on average."""
        return sum(self.rates) / len(self.rates) / self.peak

    def shape(self) -> tuple[float, ...]:
        """The rates over the peak (the busiest step is 1): what the replay scales to the trial's rate."""
        return tuple(rate / self.peak for rate in self.rates)


def _refuse(path: str, fix: str) -> None:
    raise not_allowed(KEY, path, fix)


def _rows(path: str) -> tuple[str, list[str]]:
    """The header's first column and the first column of every row after it (`#` comments and blank lines skipped)."""
    file = Path(path)
    if not file.is_file():
        _refuse(path, f"no such file; give a CSV of arrival times or per-step rates, e.g. {KEY}={EXAMPLE} "
                "(a relative path is from the directory the sweep starts in)")
    with file.open(newline="") as handle:
        lines = [row for row in csv.reader(line for line in handle if line.strip() and not line.startswith("#"))]
    if not lines:
        _refuse(path, f"the file is empty; its first line must be a header, {ARRIVALS} (one arrival time in seconds "
                f"per row) or {RATES} (requests/s per step), followed by at least one row")
    header = lines[0][0].strip() if lines[0] else ""
    if header not in (ARRIVALS, RATES):
        _refuse(path, f"the header {header!r} names neither format: write {ARRIVALS} (one arrival time in seconds "
                f"per row, in order) or {RATES} (requests/s per step) as the first line")
    values = [row[0].strip() for row in lines[1:] if row and row[0].strip()]
    if not values:
        _refuse(path, f"the file has a header ({header}) but no rows: give at least one")
    return header, values


def _numbers(path: str, header: str, values: list[str]) -> list[float]:
    numbers = []
    for row, text in enumerate(values, start=1):
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0:
            _refuse(path, f"row {row} ({header}={text!r}) is not a number >= 0; every row must be one")
        numbers.append(number)
    return numbers


def _per_second(path: str, arrivals: list[float]) -> list[float]:
    """Arrivals (in order) counted per second of the recording, from the first arrival's second."""
    for row, (before, after) in enumerate(zip(arrivals, arrivals[1:], strict=False), start=2):
        if after < before:
            _refuse(path, f"arrival times must be in order, but row {row} ({after:g} s) comes before row {row - 1} "
                    f"({before:g} s): sort the file by {ARRIVALS} (e.g. sort -n)")
    first = math.floor(arrivals[0])
    counts = [0.0] * (math.floor(arrivals[-1]) - first + 1)
    for arrival in arrivals:
        counts[math.floor(arrival) - first] += 1
    return counts


@lru_cache(maxsize=8)
def read_trace(path: str) -> Trace:
    """The checked trace, or ConfigError naming `experiment.trace`, the file and the fix."""
    header, values = _rows(path)
    numbers = _numbers(path, header, values)
    rates = _per_second(path, numbers) if header == ARRIVALS else numbers
    if max(rates) <= 0:
        _refuse(path, f"every {RATES} is 0: a trace with no requests has nothing to replay")
    return Trace(path, header, tuple(rates), hashlib.sha256(Path(path).read_bytes()).hexdigest())


def trace_settings(exp: ExperimentConfig) -> dict[str, Any]:
    """What a trace trial is measured with, part of its identity and params: the file and its digest (none for the
    other load modes, whose identity stays as it was)."""
    if exp.load_mode != "trace":
        return {}
    trace = read_trace(str(exp.trace))
    return {"trace": str(exp.trace), "trace_sha256": trace.sha256[:16], "trace_kind": trace.kind,
            "trace_steps": len(trace.rates), "trace_mean_to_peak": round(trace.mean_to_peak, 6)}


def check_trace(exp: ExperimentConfig) -> list[str]:
    """What is wrong with the experiment's trace (a rule of `ExperimentConfig.check`): load_mode=trace needs a readable
    trace, and its peak (each request rate) within max_in_flight per second; a trace without load_mode=trace would be
    ignored, so it is refused. Each problem names key, value and fix; the first only."""
    if exp.load_mode != "trace":
        if exp.trace is not None:
            return [refuse(KEY, exp.trace, f"a trace is replayed only with experiment.load_mode=trace (now "
                                           f"{exp.load_mode}): add it, or leave out {KEY}")]
        return []
    if exp.trace is None or not str(exp.trace).strip():
        return [refuse(KEY, exp.trace, f"experiment.load_mode=trace replays a trace file: give one, e.g. {KEY}="
                                       f"{EXAMPLE} experiment.request_rates=[100] (the replay's peak, req/s)")]
    problems = refused_by(read_trace, str(exp.trace))
    if problems:
        return problems
    for rate in exp.request_rates:
        if rate > exp.max_in_flight:
            return [refuse("experiment.request_rates", rate, f"with load_mode=trace each rate is the replay's peak, "
                           f"and at {rate:g} req/s more requests arrive within one second than "
                           f"experiment.max_in_flight={exp.max_in_flight} lets be outstanding at once: a server "
                           "answering within a second would still see them sent late by construction; raise "
                           f"experiment.max_in_flight to at least {math.ceil(rate)}, or lower the rate")]
    for key, value in exp.slo.targets().items():  # the first target set
        return [refuse(f"experiment.slo.{key}", value, "the SLO search finds a node's capacity under a "
                       "steady load, which the capacity plan sizes nodes with; a trace's throughput is its average, "
                       "not a capacity. Search with experiment.load_mode=poisson (or closed) in the same sweep_id, "
                       f"and replay the trace without experiment.slo.{key}: the report plans the trace's peak from "
                       "that search")]
    return []
