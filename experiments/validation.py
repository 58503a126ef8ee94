"""Checks a composed config before anything starts: one clear error naming the key, the value and the fix."""

from __future__ import annotations

from typing import Any

from serving.protocols import PROTOCOLS

BACKENDS = ("pytorch", "triton_onnx", "triton_trt")
INPUT_FORMATS = ("tensor", "jpeg")


class ConfigError(ValueError):
    """A config value is not allowed; the message names the key, the value and what is allowed."""


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _check_list(key: str, values: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if not values:
        _fail(key, list(values or []), f"give at least one of {list(allowed)}, e.g. {key}=[{allowed[0]}]")
    for value in values:
        if value not in allowed:
            _fail(key, value, f"choose from {list(allowed)}")


def _check_positive_ints(key: str, values: Any, upper: int | None = None, upper_key: str = "") -> None:
    if not values:
        _fail(key, list(values or []), f"give at least one positive integer, e.g. {key}=[1]")
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            _fail(key, value, "every entry must be a positive integer")
        if upper is not None and value > upper:
            _fail(key, value, f"must not exceed {upper_key}={upper}")


def validate(cfg: Any) -> None:
    """Raise ConfigError on the first value that is not allowed."""
    exp = cfg.experiment
    price = cfg.gpu.get("price_per_hour_usd")
    if price is None or not isinstance(price, int | float) or price < 0:
        _fail("gpu.price_per_hour_usd", price, "set a price >= 0 in USD per hour for this tier")
    _check_list("experiment.backends", exp.backends, sorted(cfg.backends))
    _check_list("experiment.protocols", exp.protocols, PROTOCOLS)
    _check_list("experiment.input_formats", exp.input_formats, INPUT_FORMATS)
    _check_positive_ints("experiment.batch_sizes", exp.batch_sizes, cfg.model.max_batch_size, "model.max_batch_size")
    _check_positive_ints("experiment.concurrency", exp.concurrency)
    for key in ("window_s", "warmup_s", "request_timeout_s", "client_num_cpus"):
        if exp[key] <= 0:
            _fail(f"experiment.{key}", exp[key], "must be > 0")
    for key in ("warmup_requests", "client_actors"):
        if exp[key] <= 0:
            _fail(f"experiment.{key}", exp[key], "must be a positive integer")
    for name in exp.backends:
        if "_target_" not in cfg.backends[name]:
            _fail(f"backends.{name}._target_", None, "name the class that serves this backend")
        if cfg.backends[name].get("backend") not in BACKENDS:
            _fail(f"backends.{name}.backend", cfg.backends[name].get("backend"), f"choose from {list(BACKENDS)}")
        _check_backend_settings(cfg, name)
    _check_crosscheck(cfg.crosscheck)


def _check_backend_settings(cfg: Any, name: str) -> None:
    """The backend class checks its own settings (keys it takes, ranges), before any server starts."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    settings = OmegaConf.to_container(cfg.backends[name], resolve=True)
    settings.pop("backend", None)
    target = settings.pop("_target_")
    try:
        cls = get_class(target)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bad _target_
        raise ConfigError(f"backends.{name}._target_={target!r} cannot be imported ({exc}): name a Backend class, "
                          "e.g. serving.triton.backend.TritonBackend") from None
    problems = cls.check_settings(name, settings, cfg.model)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_crosscheck(check: Any) -> None:
    if check.images < 1:
        _fail("crosscheck.images", check.images, "must be a positive integer")
    for numerics in ("fp32", "fp16"):
        if numerics not in check.tolerances:
            _fail(f"crosscheck.tolerances.{numerics}", None, "give max_abs_diff and min_top1_agreement")
        tolerance = check.tolerances[numerics]
        if tolerance.max_abs_diff < 0:
            _fail(f"crosscheck.tolerances.{numerics}.max_abs_diff", tolerance.max_abs_diff, "must be >= 0")
        if not 0 <= tolerance.min_top1_agreement <= 1:
            _fail(f"crosscheck.tolerances.{numerics}.min_top1_agreement", tolerance.min_top1_agreement,
                  "must be a fraction in [0, 1]")
