"""Write a built report to its folder (report.md + PNGs, report.html self-contained) and attach it to the
sweep's MLflow run: artifacts under `report/`, a `report` tag and a run description linking to it."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from experiments.config.capacity import configured_traffic
from experiments.report.build import Report, ReportOptions, build_report
from experiments.report.capacity_section import refuse_unpriced
from experiments.report.data import ReportError, SweepData, load_sweep
from experiments.report.generative.build import build_generative_report
from experiments.results.layout import REPORT_DIR, report_folder
from experiments.results.records import Status
from experiments.results.redaction import redact
from serving.process import unreachable
from serving.workloads.registry import workload

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

log = logging.getLogger(__name__)
NOTE_TAG = "mlflow.note.content"  # the run description the MLflow UI shows
# Each workload's report (`experiment.workload`, the trials' `workload` param): its sections, in order.
BUILDERS: dict[str, Callable[[SweepData, Path, ReportOptions], Report]] = {
    "image": build_report,
    "generative": build_generative_report,
}
# The options that only one workload's report takes, by workload: (option, its flag, its sweep key, what the other
# workload's report takes in its place).
ONLY_FOR = {
    "image": (("slo_p99_ms", "--slo-p99-ms", "experiment.slo.p99_ms", "--ttft-p99-ms and --tpot-p99-ms"),
              ("capacity", "--traffic-img-s", "capacity.traffic_img_s", "--peak-rps")),
    "generative": (("ttft_p99_ms", "--ttft-p99-ms", "experiment.slo.ttft_p99_ms", "--slo-p99-ms"),
                   ("tpot_p99_ms", "--tpot-p99-ms", "experiment.slo.tpot_p99_ms", "--slo-p99-ms"),
                   ("peak_rps", "--peak-rps", "capacity.peak_rps", "--traffic-img-s")),
}


@dataclass
class Published:
    folder: Path
    markdown: Path
    html: Path
    data: SweepData
    report: Report
    logged_to: str | None = None  # the sweep run id the report was attached to


def write_report(report: Report, folder: Path) -> tuple[Path, Path]:
    """report.md refers to the PNGs beside it; report.html embeds them so it reads on its own, anywhere
    (also inside the MLflow UI's artifact viewer, which shows HTML in a sandboxed frame)."""
    md = folder / "report.md"
    md.write_text(report.document.to_markdown())
    page = report.document.to_html()
    for name, path in report.images.items():
        data = base64.b64encode(path.read_bytes()).decode()
        page = page.replace(f'src="{name}"', f'src="data:image/png;base64,{data}"')
    html = folder / "report.html"
    html.write_text(page)
    return md, html


def log_report(uri: str, data: SweepData, folder: Path, summary: list[str]) -> str | None:
    """Attach the folder to the sweep run and describe it there; returns the run id (None: no sweep run)."""
    from mlflow.tracking import MlflowClient

    if data.sweep_run_id is None:
        log.warning("sweep %s has no sweep run in MLflow: the report is only in %s", data.sweep_id, folder)
        return None
    client = MlflowClient(tracking_uri=uri)
    run_id = data.sweep_run_id
    client.log_artifacts(run_id, str(folder), REPORT_DIR)
    link = (f"#/experiments/{data.experiment_id}/runs/{run_id}/artifactPath/{REPORT_DIR}/report.html"
            "?workflowType=machine_learning")  # the UI opens in its GenAI mode otherwise
    note = "\n".join([
        f"**tierbench report** of sweep `{data.sweep_id}`: [open report.html]({link}) "
        f"(artifacts → `{REPORT_DIR}/`; also `report.md` and the PNG plots).",
        "",
        *[f"- {line}" for line in summary],
        "",
        f"Regenerate: `python -m runners.report {data.sweep_id}`",
    ])
    client.set_tag(run_id, "report", f"{REPORT_DIR}/report.html")
    client.set_tag(run_id, NOTE_TAG, note)
    _log_headline_metrics(client, run_id, data)
    return run_id


def _log_headline_metrics(client: Any, run_id: str, data: SweepData) -> None:
    """A few figures on the sweep run, so the UI's run list and compare view line sweeps up side by side."""
    from mlflow.entities import Metric

    ok, sustained, now = data.ok, data.sustained, int(time.time() * 1000)
    counts = data.trials["status"].value_counts()
    values = {f"trials_{s}": float(counts.get(s, 0)) for s in Status}
    values |= {"trials_overloaded": float(ok["overloaded"].sum()), "trials_unstable": float(ok["unstable"].sum())}
    # The workload's headline figures: min_cost_per_1k_images_usd, min_latency_p99_ms, max_throughput_img_s for
    # images; min_cost_per_1m_output_tokens_usd, min_ttft_p99_ms, max_output_tokens_s for tokens.
    measured = workload(_workload(data))
    if not sustained.empty:  # an overloaded trial's latency and cost describe no load the server could keep up
        values |= {f"min_{name}": float(sustained[name].min()) for name in (measured.cost, measured.latency)
                   if name in sustained}
    if not ok.empty and measured.throughput in ok:  # what the server served flat out, overloaded or not
        values[f"max_{measured.throughput}"] = float(ok[measured.throughput].max())
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in values.items()])


def _workload(data: SweepData) -> str:
    """The one workload the sweep measured; ReportError for a sweep of several or one without a report."""
    found = data.workloads
    if len(found) > 1:
        raise ReportError(f"sweep {data.sweep_id!r} mixes workloads {found}: a report covers one; give each its own "
                          "sweep_id")
    if found[0] not in BUILDERS:
        raise ReportError(f"sweep {data.sweep_id!r} measured the workload {found[0]!r}, which has no report: one of "
                          f"{sorted(BUILDERS)}")
    return found[0]


def report_builder(data: SweepData, options: ReportOptions) -> Callable[[SweepData, Path, ReportOptions], Report]:
    """The report of the sweep's workload; ReportError for an option only another workload's report takes (naming the
    one this workload takes instead)."""
    name = _workload(data)
    for other, keys in ONLY_FOR.items():
        for option, flag, key, instead in keys if other != name else ():
            if getattr(options, option) is not None:
                raise ReportError(f"{flag} ({key}) is not allowed for sweep {data.sweep_id!r}: it measured the "
                                  f"{name} workload, and {flag} is the {other} report's; give {instead} instead")
    return BUILDERS[name]


def make_report(uri: str, experiment: str, sweep_id: str, results_dir: Path, options: ReportOptions,
                out: Path | None = None, log_to_mlflow: bool = True) -> Published:
    """Load the sweep, build and write its report (default folder `<results_dir>/<sweep_id>/report/`), and
    attach it to the sweep run unless told not to."""
    data = load_sweep(uri, experiment, sweep_id)
    build = report_builder(data, options)  # before the folder's old plots go
    if options.capacity is not None:
        refuse_unpriced(data, options.slo_p99_ms)
    folder = out or report_folder(results_dir, data.sweep_id)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.png"):  # plots of tiers no longer in the sweep must not linger
        stale.unlink()
    options.source = options.source or f"experiment `{experiment}` in `{redact(uri)}`"
    report = build(data, folder, options)
    md, html = write_report(report, folder)
    logged = log_report(uri, data, folder, report.summary) if log_to_mlflow else None
    return Published(folder, md, html, data, report, logged)



def answer_lines(published: Published) -> list[str]:
    """What `runners.report` and the end of a sweep print: the trial counts, the answer, where the report is."""
    data = published.data
    counts = data.trials["status"].value_counts()
    lines = [f"tierbench report, sweep {data.sweep_id}: {len(data.trials)} trials "
             f"({', '.join(f'{counts.get(s, 0)} {s}' for s in Status)}) "
             f"on {', '.join(info.label for info in data.tiers.values())}",
             *(f"  - {line}" for line in published.report.summary),
             f"report: {published.html.resolve()}",
             f"        {published.markdown.resolve()} (+ {len(published.report.images)} PNG plots beside it)"]
    if published.logged_to:
        lines.append(f"MLflow: attached to the sweep run {published.logged_to} (artifacts report/, tag `report`)")
    return lines


def sweep_answer(cfg: TierbenchConfig) -> list[str]:
    """The report of the sweep `cfg` ran, written and attached, as answer lines; a report that cannot be made
    (the store unreachable, no trial logged) says why and how to make it later, and never fails the sweep: what it
    measured is in the run folder and the store already."""
    from experiments.report.data import ReportError
    from experiments.results.tracking import tracking_uri

    slo = cfg.experiment.slo.p99_ms
    options = ReportOptions(slo_p99_ms=float(slo) if slo else None, capacity=configured_traffic(cfg.capacity))
    if getattr(cfg.experiment, "workload", "image") == "generative":  # its targets and plan, where the sweep set them
        targets, capacity = cfg.experiment.slo, cfg.capacity
        options.ttft_p99_ms = _number(getattr(targets, "ttft_p99_ms", None))
        options.tpot_p99_ms = _number(getattr(targets, "tpot_p99_ms", None))
        options.peak_rps = _number(getattr(capacity, "peak_rps", None))  # once the schema has it
        options.headroom = _number(getattr(capacity, "headroom", None)) if options.peak_rps is not None else None
    uri = tracking_uri(cfg.mlflow.tracking_uri)
    later = f"make it with `python -m runners.report {cfg.sweep_id}`"
    if not _server_answers(uri):   # MLflow's client would retry an unreachable server for minutes
        return [f"no report: the MLflow server {redact(uri)} does not answer; once the trials are relogged, {later}"]
    try:
        published = make_report(uri, cfg.mlflow.experiment, str(cfg.sweep_id), Path(cfg.results_dir), options)
    except (ReportError, ConnectionError, OSError) as exc:
        return [f"no report: {exc}; {later}"]
    return answer_lines(published)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _server_answers(uri: str, timeout_s: float = 5.0) -> bool:
    """Whether an http(s) tracking server accepts a connection (other stores are files: True)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return True
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return unreachable(parsed.hostname or "", port, timeout_s) is None
