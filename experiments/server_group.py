"""A server group: one backend started once on the tier's node, checked against the PyTorch reference, all its
trials measured, always stopped."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hydra.utils import get_class
from omegaconf import OmegaConf

from experiments.crosscheck import crosscheck_group
from experiments.plan import TrialGroup
from experiments.records import FAILED, SKIPPED, TrialRecord
from experiments.trial import new_record, run_trial
from serving.backend import Backend, BackendContext, ServerHandle
from serving.node import NodeInfo

log = logging.getLogger(__name__)


def build_backend(cfg: Any, name: str, node: NodeInfo, ray_options: dict[str, Any]) -> Backend:
    """The `_target_` class of `backends.<name>`, built with its settings."""
    serving = cfg.serving
    context = BackendContext(
        name=name, model=cfg.model, node=node, ray_options=ray_options, host=serving.host,
        start_timeout_s=serving.start_timeout_s, stop_timeout_s=serving.stop_timeout_s,
        triton_server=serving.triton_server, request_timeout_s=cfg.experiment.request_timeout_s,
        input_formats=tuple(cfg.experiment.input_formats),
    )
    settings = OmegaConf.to_container(cfg.backends[name], resolve=True)
    settings.pop("backend")
    return get_class(settings.pop("_target_"))(context, **settings)


def run_group(cfg: Any, group: TrialGroup, node: NodeInfo, ray_options: dict[str, Any], actors: list[Any],
              finish: Callable[[TrialRecord], None], save_server_file: Callable[[str, str], None]) -> None:
    """Skip what the node can't run, start the server, validate its outputs, measure the rest; `finish` gets
    every record."""
    backend = build_backend(cfg, group.variant, node, ray_options)
    runnable = []
    for trial in group.trials:
        reason = backend.unsupported_reason(trial.protocol, trial.input_format)
        if reason:
            finish(new_record(cfg, trial, node, status=SKIPPED, reason=reason))
        else:
            runnable.append(trial)
    if not runnable:
        return
    handle: ServerHandle | None = None
    try:
        log.info("starting %s on %s for %d trials", group.variant, node.hostname, len(runnable))
        handle = backend.start()
        for name, text in handle.artifacts.items():
            save_server_file(name, text)
        check = crosscheck_group(cfg, backend, handle, runnable, ray_options)
        while runnable:
            if check is not None and not check.passed:
                record = new_record(cfg, runnable[0], node, handle, status=FAILED, reason=check.reason())
            else:
                record = run_trial(cfg, runnable[0], backend, handle, node, actors)
            record.metrics.update(check.metrics() if check is not None else {})
            finish(record)
            runnable.pop(0)
    except Exception as exc:  # noqa: BLE001 - the server group failed: its remaining trials fail with why
        log.error("%s failed: %s", group.variant, exc)
        for trial in runnable:
            finish(new_record(cfg, trial, node, handle, status=FAILED, reason=f"{group.variant} server failed: {exc}"))
    finally:
        for name, text in backend.stop().items():
            save_server_file(name, text)
