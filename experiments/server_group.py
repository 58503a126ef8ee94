"""A server group: one backend started once on the tier's node, all its trials measured, always stopped.

A failed trial (server crash, client error, timeout) is recorded with the server's log, then the server and
the client actors are restarted so the next trial starts clean; the rest of the sweep goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hydra.utils import get_class
from omegaconf import OmegaConf

from experiments.client_actor import ClientPool
from experiments.plan import Trial, TrialGroup
from experiments.records import FAILED, SKIPPED, TrialRecord
from experiments.trial import first_line, new_record, run_trial
from serving.backend import Backend, BackendContext, ServerHandle
from serving.node import NodeInfo

log = logging.getLogger(__name__)

# Called with a finished record and the server logs to keep beside it (empty unless the trial failed).
Finish = Callable[[TrialRecord, dict[str, str]], None]


def build_backend(cfg: Any, name: str, node: NodeInfo, ray_options: dict[str, Any]) -> Backend:
    """The `_target_` class of `backends.<name>`, built with its settings."""
    serving = cfg.serving
    context = BackendContext(
        name=name, model=cfg.model, node=node, ray_options=ray_options, host=serving.host,
        start_timeout_s=serving.start_timeout_s, stop_timeout_s=serving.stop_timeout_s,
        triton_server=serving.triton_server, request_timeout_s=cfg.experiment.request_timeout_s,
    )
    settings = OmegaConf.to_container(cfg.backends[name], resolve=True)
    settings.pop("backend")
    return get_class(settings.pop("_target_"))(context, **settings)


class ServerGroup:
    def __init__(self, cfg: Any, group: TrialGroup, node: NodeInfo, ray_options: dict[str, Any],
                 clients: ClientPool, finish: Finish, save_server_file: Callable[[str, str], None]) -> None:
        self.cfg = cfg
        self.group = group
        self.node = node
        self.clients = clients
        self.finish = finish
        self.save_server_file = save_server_file
        self.backend = build_backend(cfg, group.variant, node, ray_options)
        self.handle: ServerHandle | None = None

    def run(self, trials: list[Trial]) -> None:
        """Skip what the node can't run, start the server, measure the rest; every trial gets a record."""
        runnable = []
        for trial in trials:
            reason = self.backend.unsupported_reason(trial.protocol, trial.input_format)
            if reason:
                self.finish(new_record(self.cfg, trial, self.node, status=SKIPPED, reason=reason), {})
            else:
                runnable.append(trial)
        if not runnable:
            return
        try:
            for index, trial in enumerate(runnable):
                if self.handle is None and not self._start(runnable[index:]):
                    return
                record = run_trial(self.cfg, trial, self.backend, self.handle, self.node, self.clients.actors)
                if record.status == FAILED:
                    log.warning("%s failed (%s): restarting %s", trial.name, record.reason, self.group.variant)
                    self.finish(record, self._stop())
                    self.clients.restart()
                else:
                    self.finish(record, {})
        finally:
            self._stop()

    def _start(self, pending: list[Trial]) -> bool:
        """Start the server; if it won't, every pending trial fails with the reason and the server log."""
        try:
            log.info("starting %s on %s for %d trials", self.group.variant, self.node.hostname, len(pending))
            self.handle = self.backend.start()
        except Exception as exc:  # noqa: BLE001 - a server that won't start fails its trials, not the sweep
            log.error("%s did not start: %s", self.group.variant, first_line(exc))
            logs = self._stop()
            for trial in pending:
                reason = f"{self.group.variant} server failed to start: {first_line(exc)}"
                self.finish(new_record(self.cfg, trial, self.node, status=FAILED, reason=reason), logs)
            return False
        for name, text in self.handle.artifacts.items():
            self.save_server_file(name, text)
        return True

    def _stop(self) -> dict[str, str]:
        """Stop the server (idempotent); its logs are saved with the group and returned."""
        self.handle = None
        try:
            logs = self.backend.stop()
        except Exception as exc:  # noqa: BLE001 - a crashed server may not stop cleanly; its owner is gone
            log.warning("stopping %s: %s", self.group.variant, first_line(exc))
            return {}
        for name, text in logs.items():
            self.save_server_file(name, text)
        return logs
