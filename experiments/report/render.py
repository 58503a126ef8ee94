"""A report as a list of blocks (headings, paragraphs, tables, images), written both as Markdown and as a
self-contained HTML page. Inline markup is a small Markdown subset: **bold**, `code`, [text](link)."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from experiments.report.marks import suffix

MISSING_CELL = "—"


@dataclass
class Block:
    kind: str  # h1..h3 | p | note | list | table | img
    text: str = ""
    items: list[str] = field(default_factory=list)
    table: pd.DataFrame | None = None  # cells already formatted as strings
    numeric: list[bool] = field(default_factory=list)  # right-align these columns


class Document:
    """Blocks in reading order; `to_markdown` and `to_html` give the same content."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.blocks: list[Block] = []

    def h(self, level: int, text: str) -> None:
        self.blocks.append(Block(f"h{level}", text))

    def p(self, text: str) -> None:
        self.blocks.append(Block("p", text))

    def note(self, text: str) -> None:
        """A callout: warnings (emulated results) and explanations of a table."""
        self.blocks.append(Block("note", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(Block("list", items=list(items)))

    def table(self, frame: pd.DataFrame, numeric: list[bool] | None = None) -> None:
        self.blocks.append(Block("table", table=frame, numeric=numeric or [False] * frame.shape[1]))

    def image(self, path: str, alt: str) -> None:
        self.blocks.append(Block("img", text=alt, items=[path]))

    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b.kind.startswith("h"):
                out += ["#" * (int(b.kind[1]) + 1) + " " + b.text, ""]
            elif b.kind == "p":
                out += [b.text, ""]
            elif b.kind == "note":
                out += ["> " + b.text.replace("\n", "\n> "), ""]
            elif b.kind == "list":
                out += [f"- {item}" for item in b.items] + [""]
            elif b.kind == "table":
                out += [_markdown_table(b.table, b.numeric), ""]
            elif b.kind == "img":
                out += [f"![{b.text}]({b.items[0]})", ""]
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        body = [f"<h1>{_inline(self.title)}</h1>"]
        for b in self.blocks:
            if b.kind.startswith("h"):
                level = int(b.kind[1]) + 1
                anchor = re.sub(r"[^a-z0-9]+", "-", b.text.lower()).strip("-")
                body.append(f'<h{level} id="{anchor}">{_inline(b.text)}</h{level}>')
            elif b.kind == "p":
                body.append(f"<p>{_inline(b.text)}</p>")
            elif b.kind == "note":
                body.append(f'<div class="note">{_inline(b.text).replace(chr(10), "<br>")}</div>')
            elif b.kind == "list":
                body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
            elif b.kind == "table":
                body.append(_html_table(b.table, b.numeric))
            elif b.kind == "img":
                body.append(f'<figure><img src="{html.escape(b.items[0])}" alt="{html.escape(b.text)}">'
                            f"<figcaption>{_inline(b.text)}</figcaption></figure>")
        return HTML_PAGE.format(title=html.escape(self.title), body="\n".join(body))


def _cell_md(value: str) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _markdown_table(frame: pd.DataFrame, numeric: list[bool]) -> str:
    header = "| " + " | ".join(_cell_md(c) for c in frame.columns) + " |"
    align = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    rows = ["| " + " | ".join(_cell_md(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, align, *rows])


def _html_table(frame: pd.DataFrame, numeric: list[bool]) -> str:
    head = "".join(f"<th>{_inline(str(c))}</th>" for c in frame.columns)
    rows = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="{"num" if n else "txt"}">{_inline(str(v))}</td>'
                        for v, n in zip(row, numeric, strict=True))
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _inline(text: str) -> str:
    """Escape, then the inline subset: `code`, **bold**, [text](link)."""
    out = html.escape(text, quote=False)
    if "`" not in out and "*" not in out and "[" not in out:  # most cells: a number (a large report has thousands)
        return out
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', out)


# Cell formatters: NaN shows as a dash, never as "nan".
def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _safe(fn: Callable[[float], str]) -> Callable[[object], str]:
    def fmt(value: object) -> str:
        if _missing(value):
            return MISSING_CELL
        return fn(float(value))  # type: ignore[arg-type]

    return fmt


ms = _safe(lambda v: f"{v:.1f}" if v >= 10 else f"{v:.2f}")
rate = _safe(lambda v: f"{v:,.1f}" if v >= 10 else f"{v:.2f}")
ratio = _safe(lambda v: f"{v:.2f}×")
usd = _safe(lambda v: f"${v:.3g}" if v < 1000 else f"${v:,.0f}")
usd_per_hour = _safe(lambda v: f"${v:g}")  # prices exactly as configured
count = _safe(lambda v: f"{v:,.0f}")
plain = _safe(lambda v: f"{v:g}")


def format_frame(frame: pd.DataFrame, formats: dict[str, Callable[[object], str]],
                 default: Callable[[object], str] = plain, best: dict[str, str] | None = None,
                 marks: pd.DataFrame | None = None,
                 intervals: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Format numbers column by column; `best` = {column: "min"|"max"} bolds that column's best value;
    `marks` (same index, some of the columns) holds caveat marks that follow their cells (`12.5 †`); `intervals`,
    the (low, high) ends of some columns' 95 % intervals (same index), follow their cells (`12.5 (12.1–12.9)`).
    Text columns stay as they are, a dash where missing. Cell by cell in plain Python: a large sweep's report
    formats thousands of small tables, where pandas' per-operation overhead was most of the report's time."""
    columns: dict[str, list[str]] = {}
    for col in frame.columns:
        fmt = formats.get(str(col), default)
        values = frame[col]
        numbers = values.tolist()
        if not pd.api.types.is_numeric_dtype(values):
            texts = [MISSING_CELL if _missing(v) else str(v) for v in numbers]
        else:
            texts = [fmt(v) for v in numbers]
            rule = (best or {}).get(str(col))
            if rule and values.notna().sum() > 1:
                target = values.min() if rule == "min" else values.max()
                texts = [f"**{t}**" if not _missing(v) and v == target else t
                         for v, t in zip(numbers, texts, strict=True)]
            if intervals is not None and col in intervals[0].columns:
                low, high = (ends[col].reindex(frame.index).tolist() for ends in intervals)
                texts = [f"{t} ({fmt(lo)}–{fmt(hi)})" if not (_missing(lo) or _missing(hi) or _missing(v)) else t
                         for t, v, lo, hi in zip(texts, numbers, low, high, strict=True)]
        if marks is not None and col in marks.columns:
            texts = [t + suffix(m) for t, m in zip(texts, marks[col].reindex(frame.index).tolist(), strict=True)]
        columns[str(col)] = texts
    return pd.DataFrame(columns, index=frame.index, dtype=object)


HTML_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #1f2328; line-height: 1.45; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1.2rem; font-size: 0.9rem; }}
th, td {{ border: 1px solid #d0d7de; padding: 0.25rem 0.6rem; }}
th {{ background: #f6f8fa; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
code {{ background: #f6f8fa; padding: 0 0.25rem; border-radius: 4px; }}
.note {{ border-left: 4px solid #d4a72c; background: #fff8c5; padding: 0.5rem 0.8rem; margin: 0.8rem 0; }}
figure {{ margin: 1rem 0; }} img {{ max-width: 100%; border: 1px solid #d0d7de; }}
figcaption {{ color: #59636e; font-size: 0.85rem; }}
h2 {{ border-bottom: 1px solid #d0d7de; padding-bottom: 0.2rem; margin-top: 2rem; }}
</style></head>
<body>
{body}
</body></html>
"""
