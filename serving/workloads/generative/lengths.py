"""Token lengths drawn from a `LengthSpec` (the prompts' input lengths, the requests' max_tokens): fixed, or drawn
per request from a seeded generator, so every client actor draws the same pool. Real traffic is not one length:
a server's batching, its KV cache and its prefix cache behave differently on a spread of lengths than on one."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from serving.workloads.generative import prompts  # the module: prompts.py imports this one back

if TYPE_CHECKING:
    from numpy.typing import NDArray


def draw_lengths(spec: prompts.LengthSpec, count: int, rng: np.random.Generator,
                 key: str = "length") -> NDArray[np.int64]:
    """`count` lengths from `spec`, rounded to ints and clipped to [low, high]. `spread` is the uniform's half-width,
    the normal's standard deviation, and the lognormal's standard deviation of the lengths themselves (its mu and
    sigma are solved so the lengths' mean and standard deviation are `mean` and `spread`). Clipping moves the mean
    and the spread of what is drawn (a normal clipped at `low` has a higher mean). A bad spec raises ValueError
    naming `key`."""
    problems = check_length(spec, key)
    if problems:
        raise ValueError("; ".join(problems))
    if spec.distribution == "fixed" or spec.spread == 0:
        raw = np.full(count, spec.mean, dtype=np.float64)
    elif spec.distribution == "uniform":
        raw = rng.uniform(spec.mean - spec.spread, spec.mean + spec.spread, count)
    elif spec.distribution == "normal":
        raw = rng.normal(spec.mean, spec.spread, count)
    else:  # lognormal: E = exp(mu + sigma^2 / 2), Var = (exp(sigma^2) - 1) E^2
        sigma2 = math.log1p((spec.spread / spec.mean) ** 2)
        raw = rng.lognormal(math.log(spec.mean) - sigma2 / 2, math.sqrt(sigma2), count)
    high = np.inf if spec.high is None else spec.high
    return np.clip(np.rint(raw), spec.low, high).astype(np.int64)


def check_length(spec: prompts.LengthSpec, key: str) -> list[str]:
    """What is wrong with `spec` (empty: nothing), each problem naming `key` (e.g. experiment.prompts.input_tokens),
    the value and what is allowed."""
    problems = []
    if spec.distribution not in prompts.DISTRIBUTIONS:
        allowed = ", ".join(prompts.DISTRIBUTIONS)
        problems.append(f"{key}.distribution={spec.distribution!r} is not allowed: one of {allowed}")
    if not spec.mean >= 1:  # NaN too
        problems.append(f"{key}.mean={spec.mean!r} is below 1 token: give a mean of at least 1")
    if not spec.spread >= 0:
        problems.append(f"{key}.spread={spec.spread!r} is negative: give 0 or more tokens")
    elif spec.distribution == "fixed" and spec.spread != 0:
        problems.append(f"{key}.spread={spec.spread!r} with distribution 'fixed': set spread to 0, or choose "
                        "uniform, normal or lognormal to draw lengths around the mean")
    if spec.low < 1:
        problems.append(f"{key}.low={spec.low!r} is below 1 token: give 1 or more")
    if spec.high is not None:
        if spec.high < spec.low:
            problems.append(f"{key}.high={spec.high!r} is below {key}.low={spec.low!r}: give high >= low, or null "
                            "for no upper bound")
        elif spec.mean >= 1 and not spec.low <= spec.mean <= spec.high:
            problems.append(f"{key}.mean={spec.mean!r} is outside [low, high] = [{spec.low}, {spec.high}]: every "
                            "draw would be clipped; move the mean or the bounds")
    elif spec.mean >= 1 and spec.mean < spec.low:
        problems.append(f"{key}.mean={spec.mean!r} is below {key}.low={spec.low!r}: every draw would be clipped; "
                        "move the mean or the bound")
    return problems
