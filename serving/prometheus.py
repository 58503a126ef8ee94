"""Prometheus's text format as the servers' metrics endpoints write it (Triton's, TorchServe's): one sample a line,
`name{label="value",...} value`; tierbench reads per-model counters from it."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterable

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')


def sum_counters(text: str, names: Iterable[str], labels: Iterable[str]) -> dict[str, float]:
    """Each counter of `names` summed over its samples that carry one of `labels` (e.g. `model="resnet18"`: a
    model's versions); other samples are ignored, a counter without samples is 0."""
    totals = dict.fromkeys(names, 0.0)
    labels = tuple(labels)
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match and match["name"] in totals and any(label in match["labels"] for label in labels):
            totals[match["name"]] += float(match["value"])
    return totals


def read(url: str, timeout_s: float = 5.0) -> str:
    """The text a metrics endpoint answers."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()
