"""The configuration reference page, rendered from the typed schemas and conf/: every key with its type, its default
and the comment beside it in its schema, grouped by config group, each with an anchor
(`configuration/reference.md#experiment.window_s`), and the options of each conf/ group.

The page is committed, docs/configuration/reference.md, so that its links work wherever the Markdown is read (GitHub
too); tests/test_docs_up_to_date.py fails when it is not what `render()` gives now, and says how to render it again."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from experiments.config.compose import CONF_DIR
from experiments.config.schema import BACKEND_SCHEMAS, TierbenchConfig
from serving.model_config import ModelConfig, ServedModel
from serving.workloads.generative.model import LanguageModelConfig

PAGE = "configuration/reference.md"
# Anchor of a backend class's setting: the `backend` config group, as entries name it (`/backend/<class>@<entry>`).
BACKEND_ANCHOR = "backend"


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's doc as written in `cls`'s own source (not its bases'): the comment lines right above the field
    and the comment on its line, with an inline comment's continuation lines (`#` then an indent)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    only_comment = {n for n in comments if lines[n - 1].strip().startswith("#")}
    (node,) = ast.parse(source).body
    docs: dict[str, str] = {}
    taken: set[int] = set()
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above = []
        n = stmt.lineno - 1
        while n in only_comment and n not in taken:
            above.insert(0, comments[n])
            n -= 1
        inline = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
        n = stmt.end_lineno + 1
        while inline and n in only_comment and comments[n].startswith("#  "):
            inline.append(comments[n])
            taken.add(n)
            n += 1
        docs[stmt.target.id] = " ".join(c.lstrip("#").strip() for c in above + inline)
    return docs


def _doc(cls: type, name: str) -> str:
    """The doc of field `name`: the nearest class of `cls`'s MRO that declares it with a comment."""
    owners = [c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {})]
    return next((doc for doc in (field_docs(c).get(name, "") for c in owners) if doc), "")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _yaml(value: Any) -> str:
    if value == "???" or value is dataclasses.MISSING:
        return "required (set by the group's file)"
    return f"`{yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix('...').strip()}`"


def schema_dataclasses() -> dict[str, type]:
    """The dataclasses of the config schema (experiments/config/schema.py and the parts it holds from modules of their
    own, and the model's in serving/model_config.py), by name: the types a field nests."""
    import experiments.config.capacity as capacity
    import experiments.config.experiment as experiment
    import experiments.config.inputs as inputs
    import experiments.config.owned as owned
    import experiments.config.schema as schema
    import experiments.config.search as search
    import serving.model_config as model_config
    import serving.workloads.generative.config as prompts
    import serving.workloads.generative.model as language_model

    modules = (schema, experiment, inputs, search, owned, capacity, model_config, prompts, language_model)
    candidates = {name: obj for module in modules for name, obj in vars(module).items()
                  if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__}
    # The config's parts: what the root and the model group's schemas (an image model's, a language model's) nest,
    # field by field; a dataclass beside them that no field names is a value the code computes (`Owned`).
    found, todo = {}, [schema.TierbenchConfig, model_config.ModelConfig, language_model.LanguageModelConfig]
    while todo:
        cls = todo.pop()
        if cls.__name__ in found:
            continue
        found[cls.__name__] = cls
        todo += [held for field in dataclasses.fields(cls) if (held := _held(str(field.type), candidates)[0])]
        todo += [base for base in cls.__mro__[1:] if base.__name__ in candidates]
    return {name: cls for name, cls in candidates.items() if name in found}


def _nested(type_text: str) -> tuple[type | None, str]:
    """A schema dataclass a field holds (itself, in a list, or as dict values), and how its keys continue the
    field's."""
    return _held(type_text, schema_dataclasses())


def _held(type_text: str, classes: dict[str, type]) -> tuple[type | None, str]:
    """Which of `classes` a field of type `type_text` holds, and how its keys continue the field's."""
    for name, cls in classes.items():
        for shape, join in ((name, ""), (f"list[{name}]", "[]"), (f"dict[str, {name}]", ".<name>")):
            if type_text == shape:
                return cls, join
    return None, ""


def anchor(key: str) -> str:
    """A key's anchor on the page: the key itself, list and dict placeholders dropped."""
    return key.replace("[]", "").replace(".<name>", "")


@dataclasses.dataclass(frozen=True)
class Row:
    """One key of the page: the schema class and field it documents, and what the page says of it."""

    schema: type
    field: str
    key: str
    anchor: str
    type: str
    default: str
    doc: str


def rows(cls: type, prefix: str, anchor_prefix: str | None = None) -> list[Row]:
    """Every field of `cls` as a row, nested dataclasses flattened under their key."""
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        ident = anchor(f"{anchor_prefix}.{f.name}" if anchor_prefix else key)
        nested, join = _nested(str(f.type))
        doc = _doc(cls, f.name)
        if nested is not None:
            out.append(Row(cls, f.name, key, ident, str(f.type), "" if join else "see below",
                           doc or _first_line(nested.__doc__)))
            out += rows(nested, key + join, ident)
        else:
            out.append(Row(cls, f.name, key, ident, str(f.type), _yaml(_default(f)), doc))
    return out


def _first_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped, and `<` outside code spans, so `<name>` shows instead of vanishing."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _table(entries: list[Row]) -> list[str]:
    lines = ["| key | type | default | what it sets |", "|---|---|---|---|"]
    for r in entries:
        doc = _cell(r.doc) or "(no comment in its schema)"
        lines.append(f'| <a id="{r.anchor}"></a>[`{r.key}`](#{r.anchor}) | `{r.type.replace("|", "or")}` '
                     f"| {r.default} | {doc} |")
    return lines


def _leading_comment(path: Path) -> str:
    """The comment a conf/ file opens with; its indented lines (commands, code) as code."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        words.append(f"`{text}`" if line.startswith("#  ") and text else text)
    return " ".join(words)


def _options(group: str) -> list[tuple[str, dict[str, Any], str]]:
    paths = sorted((CONF_DIR / group).rglob("*.yaml"))
    return [(str(p.relative_to(CONF_DIR / group).with_suffix("")), yaml.safe_load(p.read_text()) or {},
             _leading_comment(p)) for p in paths]


def _choices(group: str) -> list[str]:
    options = _options(group)
    if group == "gpu":
        lines = ["| option | GPU | $/hr | price source | seen | other prices |", "|---|---|---|---|---|---|"]
        for name, data, _ in options:
            others = ", ".join(f"{k} ${v.get('usd_per_hour')}" for k, v in (data.get("prices") or {}).items())
            source = _cell(str(data.get("price_source", "")))
            lines.append(f"| `{name}` | {data.get('display_name', '')} | {data.get('price_per_hour_usd')} | {source} "
                         f"| {data.get('price_seen', '')} | {others or '-'} |")
        return lines
    lines = ["| option | what it is |", "|---|---|"]
    for name, data, comment in options:
        detail = comment or ", ".join(f"{k}: `{data[k]}`" for k in ("name", "source", "factory", "path") if k in data)
        lines.append(f"| `{name}` | {_cell(detail)} |")
    return lines


def _backend_entries() -> list[str]:
    lines = ["| entry | class | what it sets beyond its class's defaults |", "|---|---|---|"]
    for name in BACKEND_SCHEMAS:  # each backend's variants file, as conf/backends/default.yaml pulls them in
        data = yaml.safe_load((CONF_DIR / "backends" / f"{name}.yaml").read_text())
        for item in data["defaults"]:
            if isinstance(item, str) and item.startswith("/backend/"):
                cls, entry = item.removeprefix("/backend/").split("@")
                changed = ", ".join(f"`{k}: {v}`" for k, v in (data.get(entry) or {}).items()) or "nothing"
                lines.append(f"| `{entry}` | [`{cls}`](#{BACKEND_ANCHOR}.{cls}) | {changed} |")
    return lines


def sections() -> list[tuple[str, list[str], list[Row]]]:
    """The page's sections in order: (heading, the prose and option tables above its keys, its keys)."""
    out = []
    top = []
    for f in dataclasses.fields(TierbenchConfig):
        nested, _ = _nested(str(f.type))
        if f.name == "backends":
            out.append(("## backends", [
                "Server configs that `experiment.backends` names: each entry of `conf/backends/<class>.yaml` extends "
                "the settings of its backend class and sets what differs. Add one with "
                "`+backend@backends.<entry>=<class>`, then set its keys (`backends.<entry>.<setting>=...`).", "",
                *_backend_entries()], [r for r in rows(TierbenchConfig, "") if r.key == "backends"]))
            for name, cls in BACKEND_SCHEMAS.items():
                intro = f'<a id="{BACKEND_ANCHOR}.{name}"></a>{_cell(_first_line(cls.__doc__))}'
                out.append((f"### Class `{name}`", [intro], rows(cls, "backends.<entry>", f"{BACKEND_ANCHOR}.{name}")))
        elif f.name == "model":  # one schema per workload: each file of conf/model/ names its own
            intro = [_cell(_first_line(ServedModel.__doc__)), "", "Options (`model=<option>`, files in `conf/model/`):",
                     "", *_choices("model")]
            out.append(("## model", intro, rows(ServedModel, "model", "any_model")))
            out.append(("### Image models (`base_model`)", [_cell(_first_line(ModelConfig.__doc__))],
                        rows(ModelConfig, "model")))
            out.append(("### Language models (`base_language_model`)",
                        [_cell(_first_line(LanguageModelConfig.__doc__))],
                        rows(LanguageModelConfig, "model", "language_model")))
        elif nested is None:
            top.append(f.name)
        else:
            intro = [_cell(_first_line(nested.__doc__))]
            if (CONF_DIR / f.name).is_dir():
                intro += ["", f"Options (`{f.name}=<option>`, files in `conf/{f.name}/`):", "", *_choices(f.name)]
            out.append((f"## {f.name}", intro, rows(nested, f.name)))
    out.append(("## Top-level keys", [], [r for r in rows(TierbenchConfig, "") if r.key in top]))
    return out


def all_rows() -> list[Row]:
    """Every key the page documents."""
    return [r for _, _, entries in sections() for r in entries]


def render() -> str:
    """The reference page's Markdown."""
    out = ["# Configuration reference", "",
           "Generated from the typed schemas (`experiments/config/schema.py`, the backends' `serving/*/settings.py`) "
           "and the files of `conf/` by `experiments/config/reference.py`: every key with its type, default and "
           "the comment beside it in its schema. Each key has an anchor: "
           "`configuration/reference.md#experiment.window_s`. Set any of them on the command line "
           "(`python -m runners.sweep experiment.window_s=2`); how the groups fit together: "
           "[Configuration](index.md).", ""]
    for heading, intro, entries in sections():
        out += [heading, "", *intro, ""]
        if entries:
            out += [*_table(entries), ""]
    return "\n".join(out)



if __name__ == "__main__":
    print(render(), end="")
