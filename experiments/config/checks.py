"""How the typed config checks itself: each part of the tree (a dataclass of the schema) with rules of its own is
`Checked`, and `experiments.config.validation.validate` walks the tree (`parts`), calling each part's `check` with its
key.

A rule lives with the key it refuses (`experiment.batch_sizes` in `ExperimentConfig.check`), reading what else of the
config it needs from `cfg` (`model.max_batch_size`). Where that key's class cannot hold it, the part above does: the
model and the backend entries are serving's classes, which know nothing of the config around them, so the workload's
model is the experiment's rule and the entries' own checks (`BackendSettings.check`) are the whole config's. The
whole config (`TierbenchConfig.check`) also holds the rules that need every part checked first: the cluster's switches
settled from the experiment's backends, the backends against them and the loads, a shared card's servers, the
settings search.

Each problem is one line naming the full key, the value and the fix (`experiments.config.errors.refuse`); `validate`
raises the first part's problems as one `ConfigError`. A part returns at its first problem (a later rule may read the
value it refuses), so a config's one bad value is what its error names; a backend entry's problems, and the prompts',
stand apart and come together. What loads a file (`check_loaded`) runs once every part's `check` has passed."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from experiments.config.errors import ConfigError

if TYPE_CHECKING:
    from experiments.config.schema import TierbenchConfig


class Checked(ABC):
    """A part of the config that checks its own values."""

    @abstractmethod
    def check(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """What is wrong with this part of `cfg`, whose key is `key` (its dotted path, e.g. `experiment.stability`):
        one line per problem, naming the full key, the value and the fix; [] when nothing is. Called after the part
        that holds it (which may decide what applies: the load mode, the workload) and before the parts it holds."""

    def check_loaded(self, key: str, cfg: TierbenchConfig) -> list[str]:
        """What loading the files the part names shows (the user's model run on a batch, the prompts built with the
        model's tokenizer): called after every part's `check`, so a cheap refusal never waits for a load."""
        return []


def refused_by(check: Callable[..., Any], *args: Any) -> list[str]:
    """The problem a checker that raises `ConfigError` finds (one read by others too: a trace file, a traffic), as a
    part's problems: [] when it passes."""
    try:
        check(*args)
    except ConfigError as exc:
        return [exc.problem]
    return []


def join(key: str, name: str) -> str:
    """`key` of a part's field `name` (the whole config's key is '')."""
    return f"{key}.{name}" if key else name


def parts(cfg: TierbenchConfig) -> Iterator[tuple[str, Checked]]:
    """Every `Checked` part of `cfg` with its key, in the tree's order, each before the parts it holds (a dataclass's
    fields, the items of its lists and the values of its dicts: `cluster.nodes[0]`, `crosscheck.tolerances.fp16`), and
    the whole config last: its rules are between parts, each checked by then."""
    yield from _below(cfg, "")
    yield "", cfg


def _below(node: Any, key: str) -> Iterator[tuple[str, Checked]]:
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        where = join(key, field.name)
        if isinstance(value, list):
            items = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
        elif isinstance(value, dict):
            items = [(f"{where}.{name}", item) for name, item in value.items()]
        else:
            items = [(where, value)]
        for item_key, item in items:
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                if isinstance(item, Checked):
                    yield item_key, item
                yield from _below(item, item_key)
