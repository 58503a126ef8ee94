"""How tests/test_docs_commands.py checks a documented command (tests/documented_commands.py): a sweep's overrides
composed with Hydra's compose API and validated as a sweep validates before any server starts, the other runners'
argparse given the documented flags (their main() stopped at the parse), and gpu_first_light.sh's options read from
the script; `failures_of` words what does not pass, or what is shown refused and passes, with its file and line."""

from __future__ import annotations

import argparse
import importlib
import inspect
import io
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from typing import Any
from unittest.mock import patch

from serving.paths import REPO_ROOT
from tests.documented_commands import ELLIPSIS, PH, SCRIPT, Command


class Refused(Exception):
    """The command as documented would not get past its command line or the config's checks."""


def _is_placeholder(value: str) -> bool:
    return PH in value or any(e in value for e in ELLIPSIS) or bool(re.fullmatch(r"[A-Z][A-Z_]*(:[A-Z0-9]+)?", value))


@cache
def _default_config() -> Any:
    from experiments.config.compose import compose

    return compose([])


def _check_key(text: str) -> None:
    """An override whose value the reader fills in: its key (or group) must exist."""
    from omegaconf import OmegaConf

    from experiments.config.compose import CONF_DIR

    key = text.lstrip("+~").split("=", 1)[0]
    if text.startswith("+") or (CONF_DIR / key).is_dir() or PH in key:  # a new key, a group, a key the reader names
        return
    absent = object()
    if OmegaConf.select(_default_config(), key, default=absent) is absent:
        raise Refused(f"{key}: no such key in the composed config")


def _points(texts: list[str]) -> list[list[str]]:
    """One config per value of the longest sweep (`gpu=a100,rtx4090`): every swept value composed once."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = [parser.parse_overrides([t])[0] for t in texts]
    values = [list(o.sweep_string_iterator()) if o.is_discrete_sweep() else None for o in parsed]
    count = max((len(v) for v in values if v), default=1)
    return [[t if v is None else f"{o.get_key_element()}={v[min(i, len(v) - 1)]}"
             for t, o, v in zip(texts, parsed, values, strict=True)] for i in range(count)]


@cache
def _composed(point: tuple[str, ...]) -> Any:
    """`compose(point)`, once per point: the check's commands share many (a refusal is raised every time)."""
    from experiments.config.compose import compose

    return compose(list(point))


@cache
def _validate(point: tuple[str, ...]) -> None:
    """What `experiments.run.sweep.run_sweep` checks before it starts anything: the typed config, validated."""
    from experiments.config.typed import typed
    from experiments.config.validation import validate

    validate(typed(_composed(point)))


def _check_overrides(texts: list[str], validate: bool) -> None:
    """Compose `texts` as the sweep's command line does before Hydra starts (group options, keys, types, every swept
    value); with `validate`, also run the checks a sweep runs before any server starts."""
    problem = _override_problem(tuple(texts), validate)
    if problem:
        raise Refused(problem)


@cache
def _override_problem(texts: tuple[str, ...], validate: bool) -> str | None:
    try:
        _compose_and_validate(list(texts), validate)
    except Refused as exc:
        return str(exc)
    return None


def _compose_and_validate(texts: list[str], validate: bool) -> None:
    import experiments.config.overrides as command_line
    from experiments.config.compose import compose
    from experiments.config.errors import ConfigError

    hydra = [t for t in texts if t.lstrip("+~").startswith(("hydra.", "hydra/"))]
    filled = [t for t in texts if t not in hydra and "=" in t and _is_placeholder(t.split("=", 1)[1])]
    real = [t for t in texts if t not in hydra and t not in filled]
    try:
        for text in filled:
            _check_key(text)
        if hydra:
            compose(hydra, return_hydra_config=True)
        if validate or not all(_merges_into_default(t) for t in real):
            with patch.object(command_line, "compose", lambda point: _composed(tuple(point))):
                command_line.check_overrides(real)
        if validate:
            for point in _points(real):
                _validate(tuple(point))
    except ConfigError as exc:
        raise Refused(str(exc)) from None
    except Exception as exc:  # Hydra's own refusals (a hydra/ group option it lacks)
        raise Refused(" ".join(f"{type(exc).__name__}: {exc}".split())) from None


def _merges_into_default(text: str) -> bool:
    """A group's option (or options: `gpu=a100,rtx4090`) that is a file of the group, or a plain `key=value` the default
    config takes, its value parsed by Hydra's override grammar and merged into the typed config: what composing it
    would find, in a fraction of the time. False sends it to the full composition (which also words the refusal)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from experiments.config.compose import CONF_DIR, options

    try:
        (override,) = OverridesParser.create().parse_overrides([text])
        key = override.key_or_group
        if (CONF_DIR / key).is_dir() and override.package is None and not override.is_delete():  # group=option(s)
            values = override.sweep_string_iterator() if override.is_discrete_sweep() else [override.value()]
            return all(str(v) in options(key) for v in values)
        if (override.is_add() or override.is_delete() or override.is_force_add() or override.is_sweep_override()
                or override.package is not None or (CONF_DIR / key).is_dir() or "." not in key):
            return False
        nested: Any = override.value()
        for part in reversed(key.split(".")):
            nested = {part: nested}
        OmegaConf.merge(_default_config(), nested)
    except Exception:
        return False
    return True


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def _parse(module_name: str, args: list[str]) -> argparse.Namespace | None:
    """Run `module_name`'s main() up to its argparse parse of `args`, and stop there: the namespace it got, None
    for `--help`; Refused with argparse's message when it rejects them."""
    module = importlib.import_module(module_name)
    real = argparse.ArgumentParser.parse_args

    def parse_only(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        raise _Parsed(real(self, args, namespace))

    err = io.StringIO()
    takes_argv = bool(inspect.signature(module.main).parameters)
    with (patch.object(argparse.ArgumentParser, "parse_args", parse_only),
          patch.object(sys, "argv", [module_name, *args]), redirect_stderr(err), redirect_stdout(io.StringIO())):
        try:
            module.main(list(args)) if takes_argv else module.main()
        except _Parsed as parsed:
            return parsed.namespace
        except SystemExit as exc:
            if exc.code in (0, None):
                return None
            said = err.getvalue().strip().splitlines() or ["(no message)"]
            raise Refused(next((line for line in said if "error:" in line), said[-1])) from None
    raise AssertionError(f"{module_name}.main() returned without parsing its command line")


def check(cmd: Command) -> None:
    """Raise Refused when `cmd` would not get past its command line (and, for a sweep, its config's checks)."""
    validate = cmd.mode in ("check", "refused")
    if cmd.target == "override":  # on its own: composed (a value refused only with others is checked with them)
        _check_overrides(cmd.args, validate=cmd.mode == "refused")
    elif cmd.target in ("runners.sweep", "runners.export"):
        from hydra._internal.utils import get_args_parser

        from runners.sweep import overrides_first

        try:
            known, unknown = get_args_parser().parse_known_args(overrides_first(list(cmd.args)))
        except SystemExit:
            raise Refused(f"Hydra's command line refuses {cmd.args}") from None
        if unknown:
            raise Refused(f"not flags of Hydra's command line: {unknown}")
        _check_overrides(known.overrides, validate=validate and cmd.target == "runners.sweep")
    elif cmd.target == SCRIPT:
        text = (REPO_ROOT / SCRIPT).read_text()
        flags = set(re.findall(r"^\s*(--[a-z-]+)\)", text, re.M))
        args = cmd.args
        after = args[args.index("--") + 1:] if "--" in args else []
        before = args[:args.index("--")] if "--" in args else args
        unknown = [w for w in before if w.startswith("--") and w not in flags]
        if unknown:
            raise Refused(f"{SCRIPT} has no option {unknown} (its options: {sorted(flags)})")
        _check_overrides(after, validate=False)
    else:
        namespace = _parse(cmd.target, cmd.args)
        if cmd.target == "runners.ceiling" and namespace is not None:
            _check_overrides(list(namespace.overrides), validate=False)


def failures_of(cmds: list[Command]) -> list[str]:
    out = []
    for cmd in cmds:
        if cmd.mode == "skip":
            continue
        try:
            check(cmd)
        except Refused as exc:
            if cmd.mode != "refused":
                out.append(f"{cmd.where()}\n    {exc}")
        else:
            if cmd.mode == "refused":
                out.append(f"{cmd.where()}\n    shown as refused (docs-check: refused), but it passes")
    return out
