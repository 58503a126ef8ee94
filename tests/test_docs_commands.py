"""Every command and config override the documentation shows still parses: `python -m runners.*` (sweeps composed
with Hydra's compose API and validated as a sweep validates before any server starts; the other runners' argparse
given the documented flags), `python benchmarks/*.py` with its flags, `benchmarks/gpu_first_light.sh`'s options, and
every override written on its own (`experiment.matrix=full`, `+gpu.prices.mine={...}`, `cluster=emulated`). A
failure names the doc file and line. Values the reader fills in (`<sweep_id>`, `N`, `...`) are not composed, but
their key must exist. Also: docs/configuration/reference.md is what the schemas render now.

An HTML comment on the line right before a paragraph or a fenced block says how to check the commands in it:
- `<!-- docs-check: refused -->`: shown failing on purpose (bad input); each must be refused;
- `<!-- docs-check: compose-only -->`: needs a file the reader provides (a model); composed, not validated;
- `<!-- docs-check: skip -->`: not checked at all.
Use them sparingly, and say why in the text."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import io
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from serving.paths import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
MARK = re.compile(r"^\s*<!--\s*docs-check:\s*(skip|compose-only|refused)\s*-->\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# A fenced block's language that holds no shell commands.
NOT_SHELL = {"yaml", "yml", "json", "dockerfile", "python", "toml", "ini", "text"}
PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")
SCRIPT = "benchmarks/gpu_first_light.sh"
# A config override written on its own: key=value, +key=value, group=option, +group@package=option.
OVERRIDE = re.compile(r"^[+~]?[a-z_][\w.@/]*=\S.*$")
# What the reader fills in: `<sweep_id>` (kept as one word, marked), an elision, an upper-case name (N, HOST:PORT).
PLACEHOLDER = re.compile(r"<([A-Za-z][^<>\n]*)>")
PH = "__placeholder__"
ELLIPSIS = ("...", "…")


@dataclass
class Command:
    """A documented command (`target`: a runner or benchmark module, the shell script, or "override") and its
    arguments, where it is shown and how to check it (check | compose-only | refused | skip)."""

    path: Path
    line: int
    text: str
    target: str
    args: list[str]
    mode: str = "check"

    def where(self) -> str:
        path = self.path.relative_to(REPO_ROOT) if self.path.is_relative_to(REPO_ROOT) else self.path
        return f"{path}:{self.line}: {self.text}"


@dataclass
class Snippet:
    """Shell text from a doc: one command of a fenced block (continuation lines joined) or an inline code span."""

    path: Path
    line: int
    text: str
    mode: str
    inline: bool = False


def snippets(path: Path) -> Iterator[Snippet]:
    lines = path.read_text().splitlines()
    in_fence, lang, mark = False, "", "check"
    prose: list[tuple[int, str, str]] = []  # (line number, text, mode) of the lines outside fences
    pending: tuple[int, str] | None = None  # a command continued with a backslash
    for n, line in enumerate(lines, start=1):
        if FENCE.match(line):
            if not in_fence:
                in_fence, lang = True, line.strip().lstrip("`~").strip().lower()
            else:
                in_fence, mark = False, "check"
            prose.append((n, "", "check"))  # a fence ends a paragraph
            continue
        if not in_fence:
            found = MARK.match(line)
            if found:
                mark = found.group(1)
            elif not line.strip():
                mark = "check"  # a mark holds for the paragraph (or fenced block) right after it
            prose.append((n, "" if found else line, mark))
            continue
        if lang in NOT_SHELL:
            continue
        text = line.strip()
        start = n if pending is None else pending[0]
        if pending is not None:
            text = pending[1] + " " + text
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        if text:
            yield Snippet(path, start, text, mark)
    yield from _inline_spans(path, prose)


def _inline_spans(path: Path, prose: list[tuple[int, str, str]]) -> Iterator[Snippet]:
    """The inline code spans of the prose; a span may wrap over the lines of its paragraph."""
    text = "\n".join(line for _, line, _ in prose)
    starts = [0]
    for _, line, _ in prose:
        starts.append(starts[-1] + len(line) + 1)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        if re.search(r"\n\s*\n", match.group(1)):
            continue
        index = next(i for i in range(len(prose)) if starts[i] <= match.start() < starts[i + 1])
        number, _, mode = prose[index]
        yield Snippet(path, number, " ".join(match.group(1).split()), mode, inline=True)


def _split(text: str) -> list[list[str]] | None:
    """Shell words of `text` in segments (split at `&&`, `||`, `;`, `|`), comments dropped; None if not shell."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return None
    segments: list[list[str]] = [[]]
    for word in words:
        if word and set(word) <= set(";&|"):
            segments.append([])
        else:
            segments[-1].append(word)
    return [s for s in segments if s]


def _tidy(args: list[str]) -> list[str]:
    """The doc's notation taken off: elisions and `[overrides]` dropped, optional `[--flag VALUE]` unwrapped."""
    out, optional = [], False
    for word in args:
        if word in ELLIPSIS or re.fullmatch(r"\[[a-z ]+\]", word):
            continue
        if word.startswith("[-"):
            word, optional = word[1:], True
        if optional and word.endswith("]"):
            word, optional = word[:-1], False
        out.append(word)
    return out


def _words(snip: Snippet) -> list[list[str]]:
    return _split(PLACEHOLDER.sub(lambda m: PH + re.sub(r"\W+", "_", m.group(1)), snip.text)) or []


def commands(path: Path) -> Iterator[Command]:
    """The runners, benchmark scripts and gpu_first_light.sh that `path` shows, with their arguments."""
    for snip in snippets(path):
        for segment in _words(snip):
            script = next((i for i, w in enumerate(segment) if w.endswith(SCRIPT)), None)
            if script is not None:
                yield Command(path, snip.line, snip.text, SCRIPT, _tidy(segment[script + 1:]), snip.mode)
                continue
            at = next((i for i, w in enumerate(segment) if PYTHON.match(w)), None)
            if at is None or at + 1 >= len(segment):
                continue
            argv = segment[at + 1:]
            if argv[0] == "-m" and len(argv) > 1 and argv[1].startswith(("runners.", "benchmarks.")):
                yield Command(path, snip.line, snip.text, argv[1], _tidy(argv[2:]), snip.mode)
            elif re.fullmatch(r"benchmarks/\w+\.py", argv[0]):
                yield Command(path, snip.line, snip.text, argv[0][:-3].replace("/", "."), _tidy(argv[1:]), snip.mode)


def _root(override: str) -> str:
    return re.split(r"[.@/\[=]", override.lstrip("+~"), maxsplit=1)[0]


def overrides(path: Path) -> Iterator[Command]:
    """Overrides written on their own in the prose (`experiment.matrix=full`, `gpu=a100,rtx4090 -m`): every word an
    override of a config key or group (trial params and tags such as `emulated=true` are not config)."""
    roots = config_roots()
    for snip in snippets(path):
        if not snip.inline:
            continue
        for words in _words(snip):
            texts = [w for w in words if w != "-m"]
            if texts and all(OVERRIDE.match(w) for w in texts) and all(_root(w) in roots for w in texts):
                yield Command(path, snip.line, snip.text, "override", texts, snip.mode)


@cache
def config_roots() -> frozenset[str]:
    """What an override may start with: a top-level key or group of the config, hydra's, and the backend group."""
    from experiments.config.schema import TierbenchConfig

    return frozenset({f.name for f in dataclasses.fields(TierbenchConfig)} | {"hydra", "backend"})


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


def _failures(cmds: list[Command]) -> list[str]:
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


def documented(finder: Any, docs: list[Path] = DOCS) -> list[Command]:
    return [c for doc in docs for c in finder(doc)]


def test_every_documented_command_parses() -> None:
    cmds = documented(commands)
    assert len(cmds) > 50, f"only {len(cmds)} commands found in the docs: the scan is broken"
    failures = _failures(cmds)
    assert not failures, "documented commands that do not parse:\n" + "\n".join(failures)


def test_every_documented_override_composes() -> None:
    found = documented(overrides)
    assert len(found) > 50, f"only {len(found)} overrides found in the docs: the scan is broken"
    failures = _failures(found)
    assert not failures, "documented overrides that do not compose:\n" + "\n".join(failures)


def test_the_check_names_the_file_and_line_of_a_wrong_command(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("Run it:\n\n```bash\npython -m runners.sweep experiment.no_such_key=1\n```\n\n"
                   "Then `experiment.batch_sizes=[64]` and `python -m runners.report --no-such-flag`.\n\n"
                   "And `python -m runners.sweep experiment.batch_sizes=[64]`.\n"
                   "<!-- docs-check: refused -->\n`gpu=tpu` is refused.\n")
    cmds = documented(commands, [doc]) + documented(overrides, [doc])
    failures = _failures(cmds)
    assert [f.split(":")[1] for f in failures] == ["4", "7", "9"], failures
    assert "no_such_key" in failures[0] and "--no-such-flag" in failures[1]
    assert "batch_sizes" in failures[2] and "max_batch_size" in failures[2]


def test_the_committed_configuration_reference_is_what_the_schemas_render() -> None:
    """docs/configuration/reference.md is committed (links to it work on GitHub too) and rendered from the schemas:
    a schema or conf/ change needs it rendered again."""
    from experiments.config.reference import PAGE, render

    path = REPO_ROOT / "docs" / PAGE
    assert path.read_text() == render(), (
        f"{path.relative_to(REPO_ROOT)} is out of date; render it again: python -m experiments.config.reference > "
        f"docs/{PAGE}")


def test_the_documented_comparison_of_two_sweeps_runs(tmp_path: Path, capsys: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/report.md's "Comparing sweeps" snippet, run as written on two synthetic sweeps of the same points. The
    snippet sets MLflow's process-wide tracking URI, as a user's script would: it is put back afterwards, or every later
    test in this worker would read this test's store."""
    import mlflow.tracking._tracking_service.utils as tracking_utils

    from tests.synthetic_trials import log_sweep

    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)

    text = (REPO_ROOT / "docs" / "report.md").read_text()
    code = text.split("<!-- docs-check: compare-sweeps -->\n```python\n", 1)[1].split("```", 1)[0]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for sweep in ("before", "after"):
        log_sweep(uri, sweep, ["local"], 3, tmp_path / "runs", requests_per_trial=20)
    assert code.count('"sqlite:///mlflow/mlflow.db"') == 1 and code.count('"20261126-101500", "20261126-143000"') == 1
    code = code.replace('"sqlite:///mlflow/mlflow.db"', repr(uri))
    code = code.replace('"20261126-101500", "20261126-143000"', '"before", "after"')
    capsys.readouterr()
    exec(compile(code, "docs/report.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "before" in printed and "after" in printed and "local" in printed, printed
    assert len(printed.strip().splitlines()) >= 5, printed  # a header and one row per operating point (3)
