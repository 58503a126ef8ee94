"""A generative tier job's ceiling: the engines its launched servers run, timed in-process on its node before any
server starts (`serving.generation.ceiling`) at the batches its trials keep in flight and the prompts' mean lengths,
kept in the tier folder's ceiling.json, and set against every trial the job finishes
(`experiments.measure.token_efficiency`). An endpoint's engine is not ours to time: its trials get the client's
verdict alone."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.measure.token_efficiency import (
    TokenCeiling,
    ceiling_batch,
    engine_batch,
    timed_batches,
    token_efficiency,
    token_verdict,
)
from experiments.plan import TrialGroup
from experiments.results.records import Status, TrialRecord
from serving.backend import Backend
from serving.node import NodeInfo

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig
    from serving.generation.ceiling import TokenEngine

log = logging.getLogger(__name__)
REPEATS = 3  # timed runs per batch, the best kept (after one untimed)


class TokenCeilingJob:
    """The engines of a generative tier job's launched servers and their in-process output tokens/s on its node."""

    def __init__(self, cfg: TierbenchConfig, node: NodeInfo, backend_of: Callable[[str], Backend]) -> None:
        self.cfg = cfg
        self.node = node
        self.backend_of = backend_of
        self.engines: dict[str, TokenEngine | None] = {}  # entry name -> its engine
        self.ceiling: TokenCeiling | None = None

    def engine_of(self, variant: str) -> TokenEngine | None:
        if variant not in self.engines:
            try:
                self.engines[variant] = getattr(self.backend_of(variant), "token_engine", lambda: None)()
            except Exception as exc:  # noqa: BLE001 - a backend that cannot be built has no ceiling
                log.debug("no token engine for %s: %s", variant, exc)
                self.engines[variant] = None
        return self.engines[variant]

    def _lengths(self) -> tuple[int, int]:
        prompts = self.cfg.experiment.prompts
        return (max(1, round(float(prompts.input_tokens.mean) * int(prompts.turns))),
                max(1, round(float(prompts.output_tokens.mean))))

    def needed(self, groups: list[TrialGroup]) -> dict[str, tuple[TokenEngine, list[int]]]:
        """Engine key -> the engine and the batches its groups' trials reach, for groups with something to run."""
        found: dict[str, tuple[TokenEngine, set[int]]] = {}
        for group in groups:
            backend = self.backend_of(group.variant)
            runnable = [t for t in group.trials if not backend.unsupported_reason(t.protocol, t.input_format)]
            engine = self.engine_of(group.variant) if runnable else None
            if engine is None:
                continue
            batches = found.setdefault(engine.key, (engine, set()))[1]
            for trial in runnable:
                batches.add(ceiling_batch(trial.concurrency or engine.max_batch, engine.max_batch))
        return {key: (engine, timed_batches(batches)) for key, (engine, batches) in found.items()}

    def measure(self, groups: list[TrialGroup], model: Any, ray_options: dict[str, Any], folder_file: Path) -> bool:
        """Time the engines on the node (one Ray task each, placed there; a GPU where Ray schedules them); writes
        ceiling.json. Never fails the sweep. True when it wrote a new file."""
        if not self.cfg.ceiling.enabled:
            log.info("ceiling: off (ceiling.enabled=false): trials carry no efficiency figures")
            return False
        needed = self.needed(groups)
        if not needed:
            return False
        import ray

        input_tokens, output_tokens = self._lengths()
        ceiling = TokenCeiling(hostname=self.node.hostname, input_tokens=input_tokens, output_tokens=output_tokens)
        log.info("ceiling: timing %d engine(s) in-process on %s before any server starts (%d tokens in, %d out): %s",
                 len(needed), self.node.hostname, input_tokens, output_tokens, ", ".join(needed))
        from serving.generation.ceiling import time_tokens

        options: dict[str, Any] = {"num_cpus": 0.01, "max_retries": 0, **ray_options}
        for key, (engine, batches) in needed.items():
            task_options = dict(options)
            if engine.device == "cuda" and self.node.ray_gpus > 0:
                task_options["num_gpus"] = min(1.0, self.node.ray_gpus)
            ref = ray.remote(max_calls=1)(time_tokens).options(**task_options).remote(
                _model_dict(model), engine.to_json(), batches, input_tokens, output_tokens, REPEATS)
            try:
                result = ray.get(ref, timeout=float(self.cfg.ceiling.timeout_s))
            except Exception as exc:  # noqa: BLE001 - the trials still run, without efficiency figures
                ray.cancel(ref, force=True)
                ceiling.errors[key] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
                log.warning("ceiling: %s not timed on %s (%s)", key, self.node.hostname, ceiling.errors[key])
                continue
            ceiling.points[key] = result["points"]
            ceiling.seconds += float(result["seconds"])
            shown = ", ".join(f"b{b} {v:,.0f}" for b, v in result["points"].items())
            log.info("ceiling: %s: %s output tokens/s [%.1f s]", key, shown, result["seconds"])
        self.ceiling = ceiling
        folder_file.write_text(json.dumps(ceiling.to_json(), indent=1))
        return True

    def annotate(self, record: TrialRecord) -> None:
        """An `ok` trial's share of its engine's ceiling at its batch, and the verdict on what holds it back."""
        if self.ceiling is None or record.status != Status.OK or record.tags.get("run_level", "trial") != "trial":
            return
        engine = self.engine_of(record.trial.variant)
        if engine is None:
            return
        batch = engine_batch(record.metrics, record.trial.concurrency or engine.max_batch, engine.max_batch)
        record.params["ceiling_runtime"] = engine.key
        record.metrics.update(token_efficiency(record.metrics, self.ceiling.at(engine.key, batch), batch))
        judged = token_verdict(record.metrics, record.params, engine.device == "cuda",
                               float(self.cfg.experiment.client_cpu_limit), engine.max_batch)
        record.tags.update(judged.tags())


def _model_dict(model: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(model)
