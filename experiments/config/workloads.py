"""`experiment.workload`: the model, the request formats, the backends and the SLO keys of a sweep all of one
workload (serving/workloads/), the experiment's rules (`ExperimentConfig.check`), and a generative sweep's prompts,
tokenizer and lengths checked before anything is sent (last: `TierbenchConfig.check_loaded`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from experiments.config.errors import ConfigError, refuse
from experiments.config.inputs import input_source
from serving.workloads.registry import workloads
from serving.workloads.workload import Workload

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig

# What a generative sweep cannot use: it has no image model, corpus or reference.
IMAGE_ONLY = {"experiment.accuracy.max_top1_drop": lambda cfg: cfg.experiment.accuracy.max_top1_drop,
              "experiment.inputs.audit": lambda cfg: cfg.experiment.inputs.audit or None,
              "experiment.inputs.labels": lambda cfg: cfg.experiment.inputs.labels,
              "experiment.slo.p99_ms": lambda cfg: cfg.experiment.slo.p99_ms}
GENERATIVE_ONLY = ("ttft_p99_ms", "tpot_p99_ms")


def request_source(cfg: TierbenchConfig, repeated: bool = False) -> Any:
    """What the clients build their requests from: the image corpus (`serving.workloads.image.corpus.InputSource`),
    or a generative sweep's conversations (`PromptSource`, with the model's tokenizer)."""
    if workload_of(cfg).image_model:
        return input_source(cfg.experiment.inputs, repeated)
    return cfg.experiment.prompts.source_for(cfg.model, repeated)


def workload_of(cfg: TierbenchConfig) -> Workload:
    """The experiment's workload; ConfigError naming the ones there are."""
    name = cfg.experiment.workload
    if name not in workloads():
        raise ConfigError(_unknown(name))
    return workloads()[name]


def _unknown(name: str) -> str:
    return refuse("experiment.workload", name, f"one of {sorted(workloads())}")


def check_workload(cfg: TierbenchConfig) -> list[str]:
    """What is not of the experiment's workload (a rule of `ExperimentConfig.check`): the model, the request formats,
    the backends, and what belongs to another workload is left unset; a generative sweep's own rules. The first
    problem only."""
    exp, model = cfg.experiment, cfg.model
    if exp.workload not in workloads():
        return [_unknown(exp.workload)]
    workload = workloads()[exp.workload]
    if type(model).workload != workload.name:
        examples = {"generative": "model=tiny_llama, or a file of conf/model/ on base_language_model",
                    "image": "model=resnet18, or a file of conf/model/ on base_model"}
        kind = type(model).workload
        return [refuse("model", model.name, f"experiment.workload={workload.name} measures {workload.unit}s and model "
                                            f"{model.name} is {_article(kind)} {kind} model: choose a model of the "
                                            f"workload ({examples.get(workload.name, '')}), or an experiment of the "
                                            "model's")]
    formats = [str(f) for f in workload.request_formats]
    for value in exp.input_formats or []:
        if value not in formats:
            return [refuse("experiment.input_formats", value, f"a {workload.name} sweep sends {formats}")]
    for name in exp.backends:
        if name in cfg.backends and not cfg.backends[name].serves(workload.name):
            settings = cfg.backends[name]
            hint = (" (an OpenAI-compatible server: an endpoint entry with kind=openai, e.g. backends.openai)"
                    if workload.name == "generative" else "")
            return [refuse("experiment.backends", name, f"backends.{name} ({settings.family}"
                           f"{', kind=' + settings.kind if hasattr(settings, 'kind') else ''}) does not serve "
                           f"{workload.name} requests: list backends that do{hint}")]
    if workload.name == "generative":
        return _check_generative(cfg)
    for key in GENERATIVE_ONLY:
        if getattr(exp.slo, key) is not None:
            return [refuse(f"experiment.slo.{key}", getattr(exp.slo, key), "a target of generative sweeps "
                           "(experiment.workload=generative); an image sweep's is experiment.slo.p99_ms")]
    return []


def _check_generative(cfg: TierbenchConfig) -> list[str]:
    exp = cfg.experiment
    for key, read in IMAGE_ONLY.items():
        value = read(cfg)
        if value is not None:
            fix = ("say which latency: experiment.slo.ttft_p99_ms (time to first token) and/or "
                   "experiment.slo.tpot_p99_ms (time per output token), in ms" if key.endswith("p99_ms") else
                   "it belongs to image sweeps: leave it unset with experiment.workload=generative")
            return [refuse(key, value, fix)]
    if list(exp.batch_sizes) != [1]:
        return [refuse("experiment.batch_sizes", list(exp.batch_sizes), "a generative request is one conversation: "
                       "[1] (the server batches requests itself; measure more at once with experiment.concurrency)")]
    if exp.load_engine == "compiled":
        return [refuse("experiment.load_engine", exp.load_engine, "the compiled engine records no token: a generative "
                       "sweep is measured by the Python client (auto or python)")]
    for key in GENERATIVE_ONLY:
        value = getattr(exp.slo, key)
        if value is not None and not (isinstance(value, int | float) and value > 0):
            return [refuse(f"experiment.slo.{key}", value, "a target in ms > 0, or null")]
    if exp.slo.min_goodput_share is not None and exp.slo.ttft_p99_ms is None and exp.slo.tpot_p99_ms is None:
        return [refuse("experiment.slo.min_goodput_share", exp.slo.min_goodput_share, "a rule of the SLO search: set "
                       "experiment.slo.ttft_p99_ms and/or tpot_p99_ms too")]
    return exp.prompts.check()  # every problem of the prompts, in one line


def check_prompts(cfg: TierbenchConfig) -> dict[str, float]:
    """Build the pool the clients will send, here, before anything starts (after every other check: it loads the
    tokenizer): the tokenizer folder loads, a JSONL of conversations reads, and no request asks for more tokens than
    the model's context holds. Returns the pool's figures; ConfigError names what is wrong."""
    from serving.workloads.generative.prompts import PromptError, context_problem, pool_stats, prompt_pool
    from serving.workloads.generative.tokenizer import TokenizerError, load_tokenizer

    model = cfg.model
    context = model.context_tokens
    try:
        if model.tokenizer:
            tokenizer = load_tokenizer(str(model.tokenizer), key="model.tokenizer")
            context = context or tokenizer.context_tokens
        pool = prompt_pool(cfg.experiment.prompts.source_for(model))
    except (PromptError, TokenizerError) as exc:
        raise ConfigError(str(exc)) from None
    except ImportError as exc:
        raise ConfigError(f"model.tokenizer={model.tokenizer!r}: reading a tokenizer needs transformers ({exc}): "
                          "install tierbench's generative extra (pip install -e '.[generative]')") from None
    problem = context_problem(pool, context)
    if problem:
        raise ConfigError(problem)
    return pool_stats(pool)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
