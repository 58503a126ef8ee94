"""`experiment.search`: which settings of which backends a search varies, each candidate as a backend entry of its
own, and the checks that refuse a bad space before anything starts.

A candidate is the searched backend's settings with the point's values put in (`candidate_settings`), added to
`cfg.backends` under a name that says them (`triton_onnx_dynbatch+instance_count=2+max_queue_delay_us=500`), so
it is planned, keyed, resumed, logged and reported like any other backend entry.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from experiments.config.checks import Checked
from experiments.config.choices import SearchStrategy
from experiments.config.errors import refuse
from serving.registry import backend_settings
from serving.settings import BackendSettings, default_of
from serving.workloads.registry import workloads
from serving.workloads.workload import Workload

if TYPE_CHECKING:
    from experiments.config.experiment import ExperimentConfig
    from experiments.config.schema import TierbenchConfig

SPACE_KEY = "experiment.search.space"


@dataclass
class SearchConfig(Checked):
    """Search each backend's server settings for the highest throughput within the SLO's targets (`slo.p99_ms`; a
    generative sweep's `slo.ttft_p99_ms` and/or `tpot_p99_ms`) (experiments/run/settings_search.py). `space`: per
    backend class (`triton`, `ray_serve`, `serve_transformers`, `vllm`), setting -> the values to try; a backend's own
    name in place of its class's gives it a space of its own; a backend with neither is measured at its own
    settings."""

    strategy: str = "none"  # SearchStrategy: none | grid | quick
    space: dict[str, Any] = field(default_factory=dict)  # backend class (or name) -> setting -> the values to try

    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """The strategy; the space is checked against the backends it searches, once they are (`check_search`)."""
        if self.strategy not in list(SearchStrategy):
            return [refuse(f"{key}.strategy", self.strategy, f"choose from {[str(s) for s in SearchStrategy]}")]
        return []


def settings_class(settings: BackendSettings) -> str:
    """The `experiment.search.space` key of a backend's settings: its class's name (the `backend` config group's)."""
    return next(name for name, schema in backend_settings().items() if isinstance(settings, schema))


def searching(cfg: TierbenchConfig) -> bool:
    return SearchStrategy(cfg.experiment.search.strategy) is not SearchStrategy.NONE


def space_key(cfg: TierbenchConfig, variant: str) -> str:
    """The `experiment.search.space` key that holds `backends.<variant>`'s space: its own name where the space lists
    it (a variant whose nature fixes a setting its class searches, e.g. direct ingress and one replica), else its
    class's."""
    return variant if variant in cfg.experiment.search.space else settings_class(cfg.backends[variant])


def space_of(cfg: TierbenchConfig, variant: str) -> dict[str, list[Any]] | None:
    """The settings to search for `backends.<variant>` and their values; None when neither it nor its class has a
    space (or no search is asked for): it is measured at its own settings."""
    if not searching(cfg):
        return None
    space = cfg.experiment.search.space.get(space_key(cfg, variant))
    return None if not space else {key: list(values) if isinstance(values, list) else values
                                    for key, values in space.items()}


def candidate_settings(base: BackendSettings, values: dict[str, Any]) -> BackendSettings:
    """`base` with `values`; a setting whose switch the candidate turns off goes back to its default, so points
    that differ only there are one candidate (measured once)."""
    candidate = dataclasses.replace(base, **values)
    defaults = {f.name: f for f in dataclasses.fields(candidate)}
    for key, switch in candidate.switched_by.items():
        if not getattr(candidate, switch):
            setattr(candidate, key, default_of(defaults[key]))
    return candidate


def searched_values(candidate: BackendSettings, space: dict[str, list[Any]]) -> dict[str, Any]:
    """The candidate's values of the searched settings (after `candidate_settings` normalised them)."""
    return {key: getattr(candidate, key) for key in space}


def candidate_name(variant: str, values: dict[str, Any]) -> str:
    """`triton_onnx+instance_count=2+preferred_batch_sizes=4-8`: the backend entry of one candidate."""
    def text(value: Any) -> str:
        if isinstance(value, list | tuple):
            return "-".join(str(v) for v in value) or "none"
        return str(value).lower() if isinstance(value, bool) else str(value)
    return "+".join([variant, *(f"{key}={text(value)}" for key, value in values.items())])


def add_candidate(cfg: TierbenchConfig, variant: str, values: dict[str, Any]) -> str:
    """Add the candidate of `backends.<variant>` at `values` to `cfg.backends`; returns its entry name."""
    space = dict.fromkeys(values)
    candidate = candidate_settings(cfg.backends[variant], values)
    name = candidate_name(variant, searched_values(candidate, space))
    cfg.backends.setdefault(name, candidate)
    return name


def check_search(cfg: TierbenchConfig) -> list[str]:
    """What keeps the search asked for from running (a rule of the whole config, `TierbenchConfig.check`: it reads
    the backends' settings against the model and the settled cluster switches), naming the key, the value and the
    fix; nothing is started before."""
    exp = cfg.experiment
    search = exp.search
    if not searching(cfg):
        return []
    keys = [key for key in workloads()[exp.workload].slo_targets if key.endswith("p99_ms")] \
        if exp.workload in workloads() else ["p99_ms"]
    if not exp.slo.targets(keys):
        first = f"experiment.slo.{keys[0]}"
        within = ("a p99 target; set one, e.g. experiment.slo.p99_ms=50" if keys == ["p99_ms"] else
                  f"its latency targets; set {' and/or '.join(f'experiment.slo.{k}' for k in keys)}, e.g. "
                  f"{first}=500")
        return [f"{first}=None is not allowed with experiment.search.strategy={search.strategy}: the search keeps the "
                f"settings with the highest throughput within {within}"]
    for key in ("protocols", "input_formats", "batch_sizes"):
        values = getattr(exp, key)
        if len(values) != 1:
            return [f"experiment.{key}={list(values)} is not allowed with a settings search: a search finds the best "
                    f"settings for one operating point; give one, e.g. experiment.{key}=[{values[0]}] (a multirun over "
                    "it searches each)"]
    if exp.workload in workloads():
        problem = _unmeasured_target(exp, workloads()[exp.workload], keys)
        if problem:
            return [problem]
    classes = backend_settings()
    unknown = [name for name in search.space if name not in classes and name not in cfg.backends]
    if unknown:
        return [f"{SPACE_KEY}.{unknown[0]} is not allowed: the space is keyed by backend class, one of "
                f"{sorted(classes)}, or by the name of a backend entry (its own space, in place of its class's), e.g. "
                f"one of experiment.backends={list(exp.backends)}"]
    searched = [v for v in exp.backends if space_of(cfg, v)]
    if not searched:
        return [refuse(SPACE_KEY, dict(search.space), f"no backend of experiment.backends={list(exp.backends)} is of a "
                       "class it searches; give values for their class "
                       f"({sorted({settings_class(cfg.backends[v]) for v in exp.backends})})")]
    for variant in searched:
        problems = _space_problems(cfg, variant, space_of(cfg, variant))
        if problems:
            return problems
    return []


def _unmeasured_target(exp: ExperimentConfig, workload: Workload, keys: list[str]) -> str | None:
    """A target the searched input format never has a figure for (an answer not streamed has no TTFT or TPOT): every
    candidate's SLO search would be skipped, so the search is refused. A generative target is named as the figure it
    bounds; an image's p99 bounds a figure every format has."""
    (request_format,) = exp.input_formats
    missing, having = workload.unmeasured(request_format, {key: key for key in exp.slo.targets(keys)})
    if not missing:
        return None
    return (f"experiment.input_formats=[{request_format}] is not allowed with a settings search within "
            f"experiment.slo.{missing[0]}: its requests never have that figure, so no candidate could meet it; "
            + (f"search a format that has it, e.g. experiment.input_formats=[{having[0]}], or " if having else "")
            + f"search without experiment.slo.{missing[0]}")


def _space_problems(cfg: TierbenchConfig, variant: str, space: dict[str, list[Any]]) -> list[str]:
    base = cfg.backends[variant]
    cls = settings_class(base)
    owner = space_key(cfg, variant)
    for key, values in space.items():
        where = f"{SPACE_KEY}.{owner}.{key}"
        if key not in base.searchable:
            return [f"{where} is not allowed: not a setting the search varies for {cls} (those are "
                    f"{list(base.searchable)})"]
        if not isinstance(values, list) or not values:
            return [refuse(where, values, f"give a non-empty list of values to try, e.g. {where}="
                                          f"[{getattr(base, key)!r}]")]
        if len({repr(v) for v in values}) != len(values):
            return [refuse(where, values, "a value is listed twice")]
        switch = base.switched_by.get(key)
        if switch and switch not in space and not getattr(base, switch):
            return [f"{where}={values!r} is not allowed for backends.{variant}, whose {switch}=false (the setting "
                    f"only applies with it on): search a variant with {switch}: true, or add "
                    f"{SPACE_KEY}.{owner}.{switch}=[false,true]"]
        refused = {repr(v): p for v in values if (p := _value_problems(cfg, base, key, v, switch, variant))}
        if refused:
            value, problem = next(iter(refused.items()))
            own = ""
            if owner == cls and not any(_value_problems(cfg, backend_settings()[cls](), key, v, switch)
                                        for v in values):  # this variant's own settings refuse: its own space
                kept = {**space, key: [v for v in values if repr(v) not in refused]}
                own = (f"; or give {variant} a space of its own, in place of {cls}'s: "
                       f"'+{SPACE_KEY}.{variant}={_hydra_dict({k: v for k, v in kept.items() if v})}'")
            return [refuse(where, values, f"the value {value} gives: {problem}{own}")]
    return []


def _value_problems(cfg: TierbenchConfig, base: BackendSettings, key: str, value: Any, switch: str | None,
                    variant: str = "the class's defaults") -> str | None:
    """Why the settings `base` (of `backends.<variant>`) cannot take `key=value` (its switch on, where it has one);
    None when they can."""
    candidate = candidate_settings(base, {key: value, **({switch: True} if switch else {})})
    problems = [*candidate.check(variant, cfg.model, cfg.cluster.switches()),
                *candidate.refuse_batch_sizes(variant, list(cfg.experiment.batch_sizes))]
    return problems[0] if problems else None


def _hydra_dict(space: dict[str, list[Any]]) -> str:
    """A space as a Hydra override's value: {num_replicas: [1], batcher: ["serve"]}."""
    return "{" + ", ".join(f"{key}: {json.dumps(values)}" for key, values in space.items()) + "}"
