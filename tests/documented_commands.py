"""The commands and config overrides the documentation shows, found for tests/test_docs_commands.py: every shell
snippet of README.md and docs/ (fenced blocks, continuation lines joined, and inline code spans) with the
`<!-- docs-check: ... -->` mark that says how to check it, read as runner, benchmark or gpu_first_light.sh commands
(`commands`) and as overrides written on their own (`overrides`). How each is checked is in tests/command_checks.py."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

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


def documented(finder: Any, docs: list[Path] = DOCS) -> list[Command]:
    return [c for doc in docs for c in finder(doc)]
