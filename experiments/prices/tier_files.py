"""The GPU tier files (conf/gpu/*.yaml): read with their text, and their prices edited as text so that comments and
layout stay; an edit is read back and refused unless it changed exactly those prices."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.prices.errors import PriceRefreshError

DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass
class TierFile:
    name: str
    path: Path
    text: str
    tier: Any  # GpuTierConfig


def load_tiers(conf_dir: Path) -> dict[str, TierFile]:
    """Every tier file of `conf_dir` (conf/gpu), by option name, with its text and its typed config."""
    from omegaconf import OmegaConf

    from experiments.config.schema import GpuTierConfig

    conf_dir = Path(conf_dir)
    paths = sorted(conf_dir.glob("*.yaml")) if conf_dir.is_dir() else []
    if not paths:
        raise PriceRefreshError(f"--conf-dir={str(conf_dir)!r}: no tier files (*.yaml) there; give the folder of "
                                f"the GPU tiers, conf/gpu")
    tiers = {}
    for path in paths:
        text = path.read_text()
        try:
            values = OmegaConf.create(text)
            values.pop("defaults", None)
            tier = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GpuTierConfig), values))
        except Exception as exc:
            raise PriceRefreshError(f"--conf-dir: {path} is not a tier file GpuTierConfig takes "
                                    f"({' '.join(str(exc).split())[:300]}); fix it first") from None
        tiers[path.stem] = TierFile(path.stem, path, text, tier)
    return tiers


# -- editing a tier file as text ------------------------------------------------------------------------------------

class EditError(PriceRefreshError):
    """The tier file is laid out in a way the text edit does not handle: nothing is written to it."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith("#")


def _find_key(lines: list[str], start: int, end: int, indent: int, key: str) -> int | None:
    pattern = re.compile(rf"^ {{{indent}}}{re.escape(key)}\s*:(\s|$)")
    return next((i for i in range(start, end) if _content(lines[i]) and _indent(lines[i]) == indent
                 and pattern.match(lines[i])), None)


def _span_end(lines: list[str], i: int, end: int) -> int:
    """The end (exclusive) of the node whose key is on line i: its more-indented lines; the blank and comment lines
    after its last one belong to what follows."""
    last, indent = i, _indent(lines[i])
    for j in range(i + 1, end):
        if _content(lines[j]):
            if _indent(lines[j]) <= indent:
                break
            last = j
    return last + 1


def _split_comment(line: str) -> tuple[str, str]:
    """(the line before its comment, ` # the comment` or "")."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), "  " + line[i:].rstrip()
    return line.rstrip(), ""


def _inline_value(line: str) -> str:
    code, _ = _split_comment(line)
    return code.split(":", 1)[1].strip() if ":" in code else ""


YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def yaml_scalar(value: Any) -> str:
    """A value as the tier files write it: numbers and days plain, a plain word plain, any other text in double
    quotes (JSON's escapes are YAML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if DAY_RE.match(text) or (re.fullmatch(r"[A-Za-z][A-Za-z0-9 _.()/-]*", text) and text.lower() not in YAML_WORDS
                              and text == text.strip()):
        return text
    return json.dumps(text)


def _set_key(lines: list[str], start: int, end: int, indent: int, key: str, value: Any,
             after: Sequence[str] = ()) -> None:
    """Set `key` of the mapping whose keys are at `indent` on lines [start, end): its line replaced (an inline
    comment kept), else a line added after the first of `after` present, else after the mapping's last line."""
    rendered = " " * indent + f"{key}: {yaml_scalar(value)}"
    i = _find_key(lines, start, end, indent, key)
    if i is not None:
        stop = _span_end(lines, i, end)
        _, comment = _split_comment(lines[i]) if stop == i + 1 else ("", "")
        lines[i:stop] = [rendered + comment]
        return
    for other in after:
        j = _find_key(lines, start, end, indent, other)
        if j is not None:
            lines.insert(_span_end(lines, j, end), rendered)
            return
    last = max((j for j in range(start, end) if _content(lines[j])), default=start - 1)
    lines.insert(last + 1, rendered)


def _entry_lines(name: str, values: dict[str, Any], indent: int, step: int) -> list[str]:
    return [" " * indent + f"{name}:"] + [" " * (indent + step) + f"{k}: {yaml_scalar(v)}" for k, v in values.items()]


def _set_entry(lines: list[str], name: str, values: dict[str, Any]) -> None:
    """Set the keys `values` of `prices.<name>`, adding the entry (and `prices:`) where missing."""
    p = _find_key(lines, 0, len(lines), 0, "prices")
    if p is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["prices:", *_entry_lines(name, values, 2, 2)]
        return
    inline = _inline_value(lines[p])
    if inline and inline not in ("{}", "null", "~"):
        raise EditError(f"prices: is written in flow style ({inline[:40]}...): write it as a block mapping "
                        f"(one entry a line) for runners.prices to edit it")
    if inline:
        lines[p] = "prices:" + _split_comment(lines[p])[1]
    end = _span_end(lines, p, len(lines))
    children = [j for j in range(p + 1, end) if _content(lines[j])]
    step = _indent(lines[children[0]]) if children else 2
    e = _find_key(lines, p + 1, end, step, name)
    if e is None:
        lines[end:end] = _entry_lines(name, values, step, step)
        return
    if _inline_value(lines[e]):  # a flow entry ({usd_per_hour: ...}): written again as a block
        stop = _span_end(lines, e, end)
        lines[e:stop] = _entry_lines(name, values, step, step)
        return
    stop = _span_end(lines, e, end)
    fields = [j for j in range(e + 1, stop) if _content(lines[j])]
    inner = _indent(lines[fields[0]]) if fields else step * 2
    for key, value in values.items():
        stop = _span_end(lines, e, len(lines))
        _set_key(lines, e + 1, stop, inner, key, value)


TOP_ORDER = ("price_per_hour_usd", "price_source", "price_seen")


def edit_tier_text(text: str, edits: Sequence[tuple[tuple[str, ...], Any]]) -> str:
    """`text` with `edits` ((key,) or ("prices", name, key) -> value) made as text: the other lines, comments and
    layout as they were. The result is read back and must be the old config with exactly these edits, else
    EditError and nothing changes."""
    lines = text.splitlines()
    entries: dict[str, dict[str, Any]] = {}
    for path, value in edits:
        if len(path) == 1:
            key = path[0]
            before = TOP_ORDER[:TOP_ORDER.index(key)][::-1] if key in TOP_ORDER else ()
            _set_key(lines, 0, len(lines), 0, key, value, after=before)
        elif len(path) == 3 and path[0] == "prices":
            entries.setdefault(path[1], {})[path[2]] = value
        else:
            raise EditError(f"cannot edit {'.'.join(path)}")
    for name, values in entries.items():
        _set_entry(lines, name, values)
    new_text = "\n".join(lines) + "\n"
    _check_edit(text, new_text, edits)
    return new_text


def _check_edit(old_text: str, new_text: str, edits: Sequence[tuple[tuple[str, ...], Any]]) -> None:
    from omegaconf import OmegaConf

    try:
        old = OmegaConf.to_container(OmegaConf.create(old_text))
        new = OmegaConf.to_container(OmegaConf.create(new_text))
    except Exception as exc:
        raise EditError(f"the edited file does not parse ({' '.join(str(exc).split())[:200]}); nothing "
                        f"written") from None
    expected = deepcopy(old) or {}
    for path, value in edits:
        node = expected
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = value
    if new != expected:
        raise EditError("the text edit would change more than the prices (the file's layout is one it does not "
                        "handle); nothing written: edit the file by hand")
