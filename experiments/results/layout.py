"""The run folder: what a sweep writes, where, before MLflow sees anything; relog and the report read it back.

    <results_dir>/<sweep_id>/            one sweep (Hydra's run and sweep dirs say the same in conf/config.yaml)
      report/                            `runners.report` (also the sweep run's artifact folder in MLflow)
      <tier>/                            one tier job: `TierFolder`
        tier.json                        tier params and tags, experiment name, resolved config (`TierInfo`)
        cluster.json                     the live Ray nodes the job saw
        node_time.json                   each node the job held: since when, until when (`results.node_time`)
        ceiling.json                     each runtime timed in-process on the node (`measure.ceiling`)
        servers/<variant>/               server logs and rendered configs of each server group
        deploy/<backend>/                a settings search's summary and its winner's deploy files
        trials/<trial>/                  record.json, latencies.csv, server_logs/ of a failed trial
          repeats/<repeat>/              each measurement of a trial measured several times (experiment.repeats):
                                         record.json, latencies.csv (the trial's record.json pools them)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPORT_DIR = "report"
TIER_FILE = "tier.json"
CLUSTER_FILE = "cluster.json"
NODE_TIME_FILE = "node_time.json"
CEILING_FILE = "ceiling.json"
INPUTS_FILE = "inputs.json"  # the corpus the clients sent: its figures (serving.workloads.image.corpus.Corpus.stats)
SERVERS_DIR = "servers"
DEPLOY_DIR = "deploy"
TRIALS_DIR = "trials"
RECORD_FILE = "record.json"
LATENCIES_FILE = "latencies.csv"
SERVER_LOGS_DIR = "server_logs"
REPEATS_DIR = "repeats"
# Files of the tier folder that go onto the tier run when written; node_time.json goes with the run's end
# (`Publisher.finish`), with the metrics summed from it (and the ceiling's, from ceiling.json).
TIER_ARTIFACTS = (CLUSTER_FILE, CEILING_FILE, INPUTS_FILE)


def sweep_folder(results_dir: str | Path, sweep_id: str) -> Path:
    return Path(results_dir) / sweep_id


def report_folder(results_dir: str | Path, sweep_id: str) -> Path:
    return sweep_folder(results_dir, sweep_id) / REPORT_DIR


def server_artifact(variant: str, name: str) -> str:
    """A server file's path in the tier folder and on the tier run alike."""
    return f"{SERVERS_DIR}/{variant}/{name}"


@dataclass(frozen=True)
class TierFolder:
    """One tier job's folder."""

    path: Path

    @staticmethod
    def of(results_dir: str | Path, sweep_id: str, tier: str) -> TierFolder:
        return TierFolder(sweep_folder(results_dir, sweep_id) / tier)

    @staticmethod
    def within(folder: Path) -> list[TierFolder]:
        """The tier folders of a sweep folder, or the one given (what `runners.relog` accepts)."""
        if (folder / TIER_FILE).exists():
            return [TierFolder(folder)]
        return [TierFolder(p.parent) for p in sorted(folder.glob(f"*/{TIER_FILE}"))]

    @property
    def tier_file(self) -> Path:
        return self.path / TIER_FILE

    @property
    def cluster_file(self) -> Path:
        return self.path / CLUSTER_FILE

    @property
    def node_time_file(self) -> Path:
        return self.path / NODE_TIME_FILE

    @property
    def ceiling_file(self) -> Path:
        return self.path / CEILING_FILE

    @property
    def servers(self) -> Path:
        return self.path / SERVERS_DIR

    def server_file(self, variant: str, name: str) -> Path:
        return self.path / server_artifact(variant, name)

    @property
    def deploy(self) -> Path:
        return self.path / DEPLOY_DIR

    def deploy_files(self) -> dict[str, str]:
        """Every file under `deploy/`, by its path in the tier folder (and on the tier run)."""
        return {str(p.relative_to(self.path)): p.read_text() for p in sorted(self.deploy.rglob("*")) if p.is_file()}

    def trial(self, slug: str) -> Path:
        return self.path / TRIALS_DIR / slug

    def trials(self) -> list[Path]:
        """Trial folders holding a record."""
        return [p.parent for p in (self.path / TRIALS_DIR).glob(f"*/{RECORD_FILE}")]


def repeat_dirs(trial_dir: Path) -> list[Path]:
    """The folders of a trial's repeats holding a record (none for a trial measured once)."""
    return [p.parent for p in (trial_dir / REPEATS_DIR).glob(f"*/{RECORD_FILE}")]
