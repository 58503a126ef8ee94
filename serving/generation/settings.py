"""The settings every launched generative server shares (`backends.<entry>` of a generative backend's class)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from serving.settings import BackendSettings

if TYPE_CHECKING:
    from serving.settings import ClusterSwitches

LOADS = "model=tiny_llama (an architecture, random weights), or a conf/model/ file naming weights or an architecture"


@dataclass
class LanguageServerSettings(BackendSettings):
    """A server tierbench starts that answers conversations over an OpenAI-compatible API, loading the model's
    folder (`model.weights`) or its architecture with random weights (`model.architecture`)."""

    workloads: ClassVar[tuple[str, ...]] = ("generative",)

    def check(self, name: str, model: Any, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        if getattr(type(model), "workload", "") != "generative":
            return problems  # the workload's own check names the model that does not fit
        if not model.launchable:
            problems.append(f"backends.{name} launches its own server and model {model.name!r} names nothing it can "
                            f"load (model.weights and model.architecture are null): {LOADS}; or measure a server "
                            "that already runs with backends.openai.url")
        return problems + model.check()
