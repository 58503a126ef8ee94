"""A sweep's runs, read from MLflow with `mlflow.search_runs` into one tidy pandas frame (one row per trial)
plus what the report needs about each tier (display name, GPU, prices, emulated or not)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from experiments.config.choices import LoadMode
from experiments.config.owned import PARAM_PREFIX as OWNED_PREFIX
from experiments.config.owned import Owned, owned_from_params
from experiments.config.prices import NODES_PARAM, Price, node_count, prices_from_params
from experiments.config.shares import SHARE_PARAMS
from experiments.measure.efficiency import VERDICT_TAGS
from experiments.report.marks import other_engine, trial_marks
from experiments.results.records import Status
from serving.workloads.registry import DEFAULT as DEFAULT_WORKLOAD

# Trial params that identify an operating point; batch and concurrency become integers.
KEY_PARAMS = ("gpu_tier", "backend", "backend_variant", "protocol", "input_format", "batch_size", "concurrency")
# How a trial loaded its server: closed loop at `concurrency`, or open loop (`load_mode`) at `request_rate`.
LOAD_PARAMS = ("load_mode", "request_rate")
# Params the report quotes (what was measured and how); `warmup_s` is left out: it is also a metric.
INFO_PARAMS = ("model", "server_mode", "window_s", "warmup_requests", "client_actors", "load_engine", "trace",
               "trace_mean_to_peak", "client_hostnames", "endpoint_url", "endpoint_model", "endpoint_platform",
               "goodput_deadline_ms", "inputs", "audit_max_speedup", "max_top1_drop")
# What was measured, beyond images: the workload (`experiment.workload`; absent in stores written before workloads:
# image), and a generative trial's token accounting, goodput targets and prompts (serving/workloads/generative/).
WORKLOAD_PARAMS = ("workload", "tokens_counted_by", "goodput_ttft_p99_ms", "goodput_tpot_p99_ms", "endpoint_pin_output",
                   "prompts", "input_tokens", "output_tokens")
# What held a trial back, against its runtime's in-process ceiling (`experiments.measure.efficiency`): the runtime's
# key (a param) and the verdict (tags). Empty where the sweep logged none (ceiling off, untimed runtime, older sweeps).
CEILING_PARAMS = ("ceiling_runtime",)
# The nodes each trial's figures were served by, each paid at its tier's price (`experiments.config.prices`): an
# endpoint's `endpoint_nodes`, else 1. Every cost the report computes at a price reads it through `nodes()`.
NODES = "nodes"
# Metrics renamed since: stores written before are read under the current names.
RENAMED_METRICS = {"validation_top1_agreement": "crosscheck_top1_agreement",
                   "validation_max_abs_diff": "crosscheck_max_abs_diff"}


class ReportError(RuntimeError):
    """The sweep can't be reported (unknown id, empty store); the message says what to do."""


@dataclass
class TierInfo:
    name: str
    display_name: str = ""
    gpu_name: str = ""
    emulated: bool = False
    prices: list[Price] = field(default_factory=list)
    owned: Owned | None = None  # the tier priced as owned hardware (`gpu.owned`); None: rented only
    # What the sweep ran on this tier (`experiment=`, `model=`): the command that measures more of it says them.
    experiment: str = ""
    model: str = ""
    # What running the benchmark cost on this tier (`experiments.results.node_time`); None when not logged.
    node_uptime_s: float | None = None
    sweep_cost_usd: float | None = None
    # A share of a card (a MIG slice, `experiments.config.shares`): the share, its profile and the whole card's tier;
    # 1.0, '' and '' for a whole card.
    gpu_share: float = 1.0
    mig_profile: str = ""
    share_of: str = ""
    tenants: int = 1  # servers sharing the card at once (a shared card's tier); 1: a slice or card of its own
    # The node's cores, and how many were busy before the tier's job started anything on it (None: not logged).
    cpu_count: int = 0
    cpu_busy_before: float | None = None

    @property
    def label(self) -> str:
        """The tier as every table shows it: emulated tiers are marked wherever they appear."""
        return f"{self.name} (emulated)" if self.emulated else self.name


@dataclass
class SweepData:
    sweep_id: str
    experiment_id: str
    sweep_run_id: str | None
    trials: pd.DataFrame  # one row per trial run (latest per trial), all statuses
    tiers: dict[str, TierInfo]
    superseded: int = 0  # older runs of a trial that was run again (resumed sweeps)
    slo: pd.DataFrame = field(default_factory=pd.DataFrame)  # SLO search results (run_level=slo), one per point
    # The trials over time whose load changes with time (ramp, bursts, trace): run id -> bins (t_s, offered_rps,
    # throughput_img_s, goodput_img_s, error_rate, latency_p50_ms, latency_p99_ms), from their MLflow step metrics
    series: dict[str, pd.DataFrame] = field(default_factory=dict)
    # The caching audit's twins (experiment.inputs.audit: one input repeated), in the columns of `trials`: never an
    # answer, only compared with the same point sent distinct inputs (experiments.report.audit_section).
    repeated: pd.DataFrame = field(default_factory=pd.DataFrame)
    # A settings search's exported files: (tier, searched backend) -> their paths on the tier run, under
    # `deploy/<backend>/` (the winner's config beside `search.json`)
    deploy: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @property
    def workloads(self) -> list[str]:
        """The workloads its trials measured (their `workload` param), one for a sweep: `image` for trials logged
        before workloads were (and frames built without the column)."""
        if "workload" not in self.trials:
            return [DEFAULT_WORKLOAD]
        return sorted(self.trials["workload"].fillna(DEFAULT_WORKLOAD).astype(str).unique()) or [DEFAULT_WORKLOAD]

    @property
    def ok(self) -> pd.DataFrame:
        return self.trials[self.trials["status"] == Status.OK]

    @property
    def sustained(self) -> pd.DataFrame:
        """`ok` trials whose load the server kept up with and whose variant stayed within the accuracy bound
        (`experiment.accuracy.max_top1_drop`): the only ones a cost figure or an answer may come from."""
        ok = self.ok
        keep = ~ok["overloaded"]
        if "over_accuracy_bound" in ok:  # frames built by hand (tests, older readers) may lack it
            keep &= ~ok["over_accuracy_bound"].astype(bool)
        return ok[keep]


@contextlib.contextmanager
def _tracking(uri: str) -> Iterator[None]:
    """`mlflow.search_runs` reads the global tracking URI (and setting it writes $MLFLOW_TRACKING_URI): set it
    for the call, then put both back as they were."""
    from mlflow.tracking._tracking_service import utils

    import mlflow

    before_uri, before_env = utils._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before_uri)
        if before_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before_env


def _search(experiment_id: str, filter_string: str, order_by: list[str] | None = None) -> pd.DataFrame:
    import mlflow

    return mlflow.search_runs(experiment_ids=[experiment_id], filter_string=filter_string, order_by=order_by,
                              output_format="pandas")


def resolve_sweep_id(experiment_id: str, sweep_id: str) -> str:
    """`latest` is the sweep whose sweep run started last."""
    if sweep_id != "latest":
        return sweep_id
    runs = _search(experiment_id, "tags.run_level = 'sweep'", ["attributes.start_time DESC"])
    if runs.empty:
        raise ReportError("no sweep in this experiment yet: run `python -m runners.sweep` first")
    return str(runs.iloc[0]["tags.sweep_id"])


def load_sweep(uri: str, experiment: str, sweep_id: str = "latest") -> SweepData:
    """Read the sweep's sweep, tier and trial runs; raise ReportError when there is nothing to report."""
    import mlflow

    with _tracking(uri):
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None:
            raise ReportError(f"no experiment {experiment!r} in {uri}: run `python -m runners.sweep` first, or "
                              "pass --tracking-uri / --experiment of the store the sweep logged to")
        sweep_id = resolve_sweep_id(exp.experiment_id, sweep_id)
        runs = _search(exp.experiment_id, f"tags.sweep_id = '{sweep_id}'")
    if runs.empty:
        raise ReportError(f"no runs tagged sweep_id={sweep_id!r} in experiment {experiment!r} ({uri}); "
                          "`python -m runners.report latest` reports the last sweep")
    level = runs.get("tags.run_level", pd.Series("", index=runs.index))
    sweep_runs = runs[level == "sweep"].sort_values("start_time")
    tier_runs = runs[level == "tier"]
    trials, superseded = tidy_trials(runs[level == "trial"])
    if trials.empty:
        raise ReportError(f"sweep {sweep_id!r} has no trial runs yet")
    twins = trials["repeated_input"]
    trials, repeated = trials[~twins].reset_index(drop=True), trials[twins].reset_index(drop=True)
    slo = tidy_slo(runs[level == "slo"])
    return SweepData(sweep_id=sweep_id, experiment_id=exp.experiment_id,
                     sweep_run_id=str(sweep_runs.iloc[0]["run_id"]) if not sweep_runs.empty else None,
                     trials=trials, tiers=tier_infos(tier_runs, trials), superseded=superseded,
                     slo=slo, series=load_series(uri, trials), repeated=repeated,
                     deploy=deploy_files(uri, tier_runs, slo))


def deploy_files(uri: str, tier_runs: pd.DataFrame, slo: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Each searched backend's files on its tier run (`deploy/<backend>/...`, paths below that folder); nothing
    without a settings search."""
    if slo.empty or "search_of" not in slo or slo["search_of"].isna().all() or tier_runs.empty:
        return {}
    from mlflow import MlflowClient

    client = MlflowClient(uri)

    def files(run_id: str, path: str) -> list[str]:
        found = []
        for info in client.list_artifacts(run_id, path):
            found += files(run_id, info.path) if info.is_dir else [info.path]
        return found

    out = {}
    for _, row in tier_runs.iterrows():
        tier = row.get("params.gpu_tier")
        for backend in sorted(set(slo.loc[slo["tier"] == tier, "search_of"].dropna())):
            folder = f"deploy/{backend}"
            out[(tier, backend)] = sorted(p.removeprefix(folder + "/") for p in files(row["run_id"], folder))
    return out


# Load modes whose trials are read over time (the report's "Traffic over time"), and at most how many trials.
OVER_TIME = (LoadMode.RAMP, LoadMode.BURSTS, LoadMode.TRACE)
MAX_SERIES = 60


def load_series(uri: str, trials: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The bins of each trial whose load changes with time, from its step metrics (`series_<name>`), by run id; trials
    that logged none (older sweeps, trials that measured nothing) are left out."""
    from experiments.results.records import SERIES_PREFIX
    from mlflow import MlflowClient

    # failed ones too: a trial past the error budget keeps its figures, and its course shows when it broke
    chosen = trials[(trials["status"] != Status.SKIPPED) & trials["load_mode"].isin([str(m) for m in OVER_TIME])]
    names = [c.removeprefix(SERIES_PREFIX) for c in trials.columns if c.startswith(SERIES_PREFIX)]
    if chosen.empty or not names:
        return {}
    client, out = MlflowClient(uri), {}
    for run_id in chosen["run_id"].head(MAX_SERIES):
        columns = {name: pd.Series({m.step: m.value for m in client.get_metric_history(run_id, SERIES_PREFIX + name)})
                   for name in names}
        frame = pd.DataFrame(columns).sort_index()
        if not frame.empty:
            out[str(run_id)] = frame
    return out


SLO_METRICS = ("slo_p99_ms", "slo_met", "slo_limited", "slo_client_bound", "slo_max_load", "slo_max_throughput_img_s",
               "slo_max_goodput_img_s", "slo_p99_at_max_ms", "cost_per_1k_images_at_slo_usd", "slo_probes",
               "slo_stable_at_max", "slo_max_throughput_img_s_ci_low", "slo_max_throughput_img_s_ci_high",
               # a generative sweep's: its TTFT and TPOT p99 targets and what its highest load within them served
               "slo_ttft_p99_ms", "slo_tpot_p99_ms", "slo_ttft_p99_at_max_ms", "slo_tpot_p99_at_max_ms",
               "slo_max_output_tokens_s", "slo_max_goodput_output_tokens_s", "cost_per_1m_output_tokens_at_slo_usd")
# At the highest load within the target: the probe's figures against its runtime's in-process ceiling and the GPU busy
# there (`experiments.run.server_group`). NaN, with `ceiling_runtime` and the verdict's tags empty, where the summary
# carries none (ceiling off, an untimed runtime, older sweeps).
SLO_AT_MAX = ("slo_ceiling_share_at_max", "slo_ceiling_share_best_at_max", "slo_ceiling_share_resident_at_max",
              "slo_gpu_util_pct_at_max")


# Params of a settings search's candidates (experiments/run/backend_search.py): what backend, which values.
SEARCH_PARAMS = ("search_of", "search_strategy", "search_values", "search_start")


def tidy_slo(runs: pd.DataFrame) -> pd.DataFrame:
    """SLO search results: one row per operating point (the latest run of each), params, metrics and the verdict's
    tags unprefixed."""
    if runs.empty:
        return pd.DataFrame()
    runs = runs.sort_values("start_time").drop_duplicates("tags.trial_key", keep="last")
    out = pd.DataFrame({"tier": _column(runs, "params.gpu_tier"), "status": _column(runs, "tags.status", ""),
                        NODES: _node_counts(runs)})
    for key in ("backend", "backend_variant", "protocol", "input_format", "batch_size", "load_mode", *SEARCH_PARAMS):
        out[key] = _column(runs, f"params.{key}")
    for metric in (*SLO_METRICS, *SLO_AT_MAX):
        out[metric] = pd.to_numeric(_column(runs, f"metrics.{metric}"), errors="coerce")
    for key in CEILING_PARAMS:
        out[key] = _column(runs, f"params.{key}", "").fillna("").astype(str)
    for key in VERDICT_TAGS:
        out[key] = _column(runs, f"tags.{key}", "").fillna("").astype(str)
    out["variant"] = out.pop("backend_variant").fillna(out["backend"])
    return out.reset_index(drop=True)


def _column(runs: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    return runs[name] if name in runs.columns else pd.Series(default, index=runs.index, dtype=object)


def _node_counts(runs: pd.DataFrame) -> pd.Series:
    return _column(runs, f"params.{NODES_PARAM}").map(node_count).astype(int)


def nodes(rows: pd.DataFrame | pd.Series) -> Any:
    """The nodes to price each of `rows` (a frame of trials, or one trial's row) for: its `nodes` (a Series, or an
    int for a row); 1 where the frame has no such column (a launched server is one node)."""
    return rows[NODES] if NODES in rows else 1


def tidy_trials(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Trial runs -> one row per trial: params and tags without prefixes, metrics under their MLflow names.

    A trial run again (a resumed sweep) keeps its latest `ok` run, else its latest run."""
    if runs.empty:
        return pd.DataFrame(), 0
    out = pd.DataFrame({
        "run_id": runs["run_id"],
        "run_name": _column(runs, "tags.mlflow.runName", ""),
        "start_time": runs["start_time"],
        "tier": _column(runs, "params.gpu_tier").fillna(_column(runs, "tags.gpu_tier")),
        "status": _column(runs, "tags.status", "").fillna(""),
        "reason": _column(runs, "tags.reason", "").fillna(""),
        "emulated": _column(runs, "tags.emulated", "false").fillna("false").astype(str).str.lower() == "true",
        "trial_key": _column(runs, "tags.trial_key").fillna(runs["run_id"]),
        NODES: _node_counts(runs),
    })
    for key in (*KEY_PARAMS[1:], *LOAD_PARAMS, *INFO_PARAMS, *SHARE_PARAMS, *WORKLOAD_PARAMS):
        out[key] = _column(runs, f"params.{key}")
    out["workload"] = out["workload"].fillna(DEFAULT_WORKLOAD)
    out["variant"] = out.pop("backend_variant").fillna(out["backend"])
    for key in CEILING_PARAMS:
        out[key] = _column(runs, f"params.{key}", "").fillna("").astype(str)
    for key in VERDICT_TAGS:
        out[key] = _column(runs, f"tags.{key}", "").fillna("").astype(str)
    for key in ("batch_size", "concurrency"):
        out[key] = pd.to_numeric(out[key], errors="coerce").astype("Int64")
    out["load_mode"] = out["load_mode"].fillna(LoadMode.CLOSED)
    out["request_rate"] = pd.to_numeric(out["request_rate"], errors="coerce").fillna(0.0)
    # Metrics and prices join in one concat: a column inserted at a time fragments the frame (pandas warns, once per
    # column, past a hundred of them: a GPU trial logs more than that).
    extra: dict[str, pd.Series] = {}
    for col in runs.columns:
        if col.startswith("metrics."):
            name = col.removeprefix("metrics.")
            name, values = RENAMED_METRICS.get(name, name), runs[col].astype(float)
            known = extra.get(name, out[name] if name in out else None)
            extra[name] = values if known is None else known.combine_first(values)
        elif col.startswith("params.price_") and col.endswith("_per_hour_usd"):
            extra[col.removeprefix("params.")] = pd.to_numeric(runs[col], errors="coerce")
        elif col.startswith(f"params.{OWNED_PREFIX}"):  # ownership assumptions: the tier's, on every trial
            extra[col.removeprefix("params.")] = runs[col]
    out = pd.concat([out.drop(columns=[name for name in extra if name in out]), pd.DataFrame(extra, index=out.index)],
                    axis=1)
    out["stack"] = out["variant"] + "/" + out["protocol"] + "/" + out["input_format"]
    out["load"] = _load_labels(out)
    # Flags from the trial's 0/1 metrics (absent: the trial predates them, or a closed loop can't overload).
    out["unstable"] = _column(out, "stable", 1.0).astype(float).eq(0)
    out["overloaded"] = _column(out, "overloaded", 0.0).astype(float).eq(1)
    out["client_behind"] = _column(out, "client_behind", 0.0).astype(float).eq(1)  # the client missed the schedule
    # Another engine than most trials' (e.g. a TLS endpoint, which only the Python client speaks).
    out["other_engine"] = pd.Series(False, index=out.index)
    ok = out["status"] == Status.OK
    out.loc[ok, "other_engine"] = other_engine(out.loc[ok, "load_engine"])
    out["marks"] = trial_marks(out["unstable"], out["overloaded"], out["other_engine"])
    out["server_count_mismatch"] = _column(runs, "tags.server_count_mismatch", "false").fillna("false") == "true"
    # Set on a trial measured again on a fresh server after its server failed under it (experiment.trial_retries).
    out["earlier_failure"] = _column(runs, "tags.earlier_failure", "").fillna("")
    out["repeated_input"] = _column(runs, "params.repeated_input", "False").fillna("False").astype(str) == "True"
    # A variant that lost more top-1 than the sweep's bound allows: measured and shown, never chosen.
    bound = pd.to_numeric(out["max_top1_drop"], errors="coerce")
    out["over_accuracy_bound"] = (_column(out, "top1_drop", float("nan")).astype(float) > bound).fillna(False)
    out["_ok"] = out["status"] == Status.OK
    out = out.sort_values(["_ok", "start_time"]).drop_duplicates(["tier", "trial_key"], keep="last")
    superseded = len(runs) - len(out)
    out = out.drop(columns="_ok").sort_values(["tier", "variant", "protocol", "input_format", "batch_size",
                                               "load"]).reset_index(drop=True)
    return out, superseded


def open_loop(trials: pd.DataFrame) -> pd.Series:
    """Which trials loaded their server in an open loop (by `load_mode`)."""
    return trials["load_mode"].map(lambda mode: LoadMode(mode).open_loop).astype(bool)


def _load_labels(trials: pd.DataFrame) -> pd.Categorical:
    """`c4`, `poisson-r80`: ordered closed loops first by concurrency, then open loops by mode and rate (an
    open-loop trial logs concurrency 0, so concurrency alone would fold all its rates into one point)."""
    loads = list(zip(trials["load_mode"], trials["concurrency"].fillna(0).astype(int), trials["request_rate"],
                     strict=True))
    order = sorted(set(loads), key=lambda load: (LoadMode(load[0]).open_loop, *load))

    def label(load: tuple[str, int, float]) -> str:
        return LoadMode(load[0]).label(load[1], load[2])

    return pd.Categorical([label(load) for load in loads],
                          categories=list(dict.fromkeys(label(load) for load in order)), ordered=True)


def tier_infos(tier_runs: pd.DataFrame, trials: pd.DataFrame) -> dict[str, TierInfo]:
    """Per tier: from its tier run's params (prices with their sources), else from its trials' params."""
    infos: dict[str, TierInfo] = {}
    for tier, rows in trials.groupby("tier", sort=True):
        info = TierInfo(str(tier), emulated=bool(rows["emulated"].any()))
        match = tier_runs[_column(tier_runs, "params.gpu_tier") == tier] if not tier_runs.empty else tier_runs
        if not match.empty:
            row = match.iloc[0]
            params = {c.removeprefix("params."): row[c] for c in match.columns
                      if c.startswith("params.") and pd.notna(row[c])}
            info.display_name = str(params.get("gpu_display_name", ""))
            info.gpu_name = str(params.get("gpu_name", ""))
            info.experiment = str(params.get("experiment", ""))
            info.model = str(params.get("model", ""))
            info.emulated = info.emulated or str(row.get("tags.emulated", "false")).lower() == "true"
            info.prices = prices_from_params(params)
            info.owned = owned_from_params(params)
            _read_share(info, params)
            info.cpu_count = int(float(params.get("node_cpu_count", 0)))
            if "node_cpu_busy_before" in params:
                info.cpu_busy_before = float(params["node_cpu_busy_before"])
            for metric in ("node_uptime_s", "sweep_cost_usd"):
                value = row.get(f"metrics.{metric}")
                if value is not None and pd.notna(value):
                    setattr(info, metric, float(value))
        if not info.model and "model" in rows and rows["model"].notna().any():
            info.model = str(rows["model"].dropna().iloc[0])
        if info.owned is None:  # no tier run: the trials carry the ownership assumptions too
            first = rows.iloc[0]
            info.owned = owned_from_params({c: first[c] for c in rows.columns
                                            if c.startswith(OWNED_PREFIX) and pd.notna(first[c])})
        if not info.share_of:  # no tier run (or one logged before shares): the trials carry the share too
            first = rows.iloc[0]
            _read_share(info, {key: first[key] for key in SHARE_PARAMS if key in rows and pd.notna(first[key])})
        if not info.prices:  # no tier run: the trial params still carry every price, without sources
            first = rows.iloc[0]
            info.prices = prices_from_params({c: first[c] for c in rows.columns
                                              if c.startswith("price_") and pd.notna(first[c])})
        infos[str(tier)] = info
    return infos


def _read_share(info: TierInfo, params: dict[str, Any]) -> None:
    """A share of a card from its params (as logged, or MLflow's text); a whole card's stay as they are."""
    value = params.get("gpu_share")
    share = pd.to_numeric(value, errors="coerce") if value not in (None, "") else None
    if share is not None and pd.notna(share) and 0 < float(share) <= 1:
        info.gpu_share = float(share)
    info.mig_profile = str(params.get("mig_profile") or info.mig_profile or "")
    info.share_of = str(params.get("share_of") or info.share_of or "")
    count = pd.to_numeric(params.get("tenants"), errors="coerce") if params.get("tenants") not in (None, "") else None
    if count is not None and pd.notna(count) and count >= 1:
        info.tenants = int(count)
