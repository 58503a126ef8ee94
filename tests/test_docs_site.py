"""The documentation site and what points into it: `mkdocs build --strict` passes (broken links and anchors, pages
missing from the nav fail it), the README stays short and keeps its two set-up commands, the configuration
reference documents every field of every schema, and every `docs/<page>.md#<anchor>` the code and the README name
exists in the built site."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config.reference import all_rows, schema_dataclasses
from experiments.config.schema import BACKEND_SCHEMAS, TierbenchConfig
from serving.paths import REPO_ROOT

# The README's set-up commands, as .ci/run and its readers run them: they change only together.
SETUP_COMMANDS = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt uv && "
    "uv pip install --compile-bytecode -c constraints.txt -e '.[cpu]' && python -m runners.sweep",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints.txt uv && "
    "uv pip install --compile-bytecode -c constraints.txt -e '.[dev]' && python -m pytest",
)
README_MAX_LINES = 200
# A path into the site as code, messages and the README write it, with its anchor when it has one.
DOCS_PATH = re.compile(r"docs/([\w./-]+?\.md)(?:#([\w.-]+))?")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the [docs] extra, in [dev])")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def built_ids(site: Path, page: str) -> set[str] | None:
    """The element ids of docs/`page` as built (None when the site has no such page)."""
    stem = page.removesuffix(".md")
    html = site / ("index.html" if stem == "index" else
                   f"{stem.removesuffix('/index')}/index.html" if stem.endswith("/index") else f"{stem}/index.html")
    return set(re.findall(r'id="([^"]+)"', html.read_text())) if html.exists() else None


@pytest.mark.slow
def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "configuration" / "reference" / "index.html").exists()


def test_readme_is_short_and_keeps_the_two_setup_commands() -> None:
    """And the site's Getting started shows the same two, so they cannot drift apart."""
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert [line for line in lines if line.startswith("python3 -m venv")] == list(SETUP_COMMANDS)
    started = (REPO_ROOT / "docs" / "getting-started.md").read_text().splitlines()
    assert [line for line in started if line.startswith("python3 -m venv")] == list(SETUP_COMMANDS)


@pytest.mark.slow
def test_the_reference_documents_every_schema_field(site: Path) -> None:
    documented = {(r.schema, r.field): r for r in all_rows()}
    ids = built_ids(site, "configuration/reference.md")
    for cls in [*schema_dataclasses().values(), *BACKEND_SCHEMAS.values()]:
        for f in dataclasses.fields(cls):
            row = documented.get((cls, f.name))
            if row is None and cls is TierbenchConfig and f.name in ids:
                continue  # a config group: its section (`## gpu`) holds its keys
            assert row is not None, f"{cls.__name__}.{f.name} has no row in the configuration reference"
            assert row.anchor in ids, f"{row.key}: no anchor #{row.anchor} on the built page"
            if cls in schema_dataclasses().values():
                assert row.doc, f"{cls.__name__}.{f.name}: write a comment beside it in experiments/config/schema.py"


def _files_naming_docs() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    return [REPO_ROOT / p for p in tracked if p.endswith((".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".md"))
            and not p.startswith("docs/") and (REPO_ROOT / p).is_file()]


@pytest.mark.slow
def test_every_docs_path_in_code_and_readme_exists(site: Path) -> None:
    """`docs/troubleshooting.md#bad-input` in an error message, a docstring or the README: the page is in the site
    and has that heading (MkDocs makes a heading's anchor from its words)."""
    broken = []
    seen = 0
    for path in _files_naming_docs():
        for match in DOCS_PATH.finditer(path.read_text(errors="replace")):
            page, anchor = match.groups()
            seen += 1
            ids = built_ids(site, page)
            if ids is None or (anchor and anchor not in ids):
                broken.append(f"{path.relative_to(REPO_ROOT)}: {match.group(0)}")
    assert seen, "no docs/ path found in the code: the scan is broken"
    assert not broken, "paths into docs/ that the site lacks:\n" + "\n".join(broken)
