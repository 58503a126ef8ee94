"""Every command and config override the documentation shows still parses: `python -m runners.*` (sweeps composed
with Hydra's compose API and validated as a sweep validates before any server starts; the other runners' argparse
given the documented flags), `python benchmarks/*.py` with its flags, `benchmarks/gpu_first_light.sh`'s options, and
every override written on its own (`experiment.matrix=full`, `+gpu.prices.mine={...}`, `cluster=emulated`). A
failure names the doc file and line. Values the reader fills in (`<sweep_id>`, `N`, `...`) are not composed, but
their key must exist. The scan is tests/documented_commands.py, the checks tests/command_checks.py.

An HTML comment on the line right before a paragraph or a fenced block says how to check the commands in it:
- `<!-- docs-check: refused -->`: shown failing on purpose (bad input); each must be refused;
- `<!-- docs-check: compose-only -->`: needs a file the reader provides (a model); composed, not validated;
- `<!-- docs-check: skip -->`: not checked at all.
Use them sparingly, and say why in the text."""

from __future__ import annotations

from pathlib import Path

from tests.command_checks import failures_of
from tests.documented_commands import commands, documented, overrides


def test_every_documented_command_parses() -> None:
    cmds = documented(commands)
    assert len(cmds) > 50, f"only {len(cmds)} commands found in the docs: the scan is broken"
    failures = failures_of(cmds)
    assert not failures, "documented commands that do not parse:\n" + "\n".join(failures)


def test_every_documented_override_composes() -> None:
    found = documented(overrides)
    assert len(found) > 50, f"only {len(found)} overrides found in the docs: the scan is broken"
    failures = failures_of(found)
    assert not failures, "documented overrides that do not compose:\n" + "\n".join(failures)


def test_the_check_names_the_file_and_line_of_a_wrong_command(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("Run it:\n\n```bash\npython -m runners.sweep experiment.no_such_key=1\n```\n\n"
                   "Then `experiment.batch_sizes=[64]` and `python -m runners.report --no-such-flag`.\n\n"
                   "And `python -m runners.sweep experiment.batch_sizes=[64]`.\n"
                   "<!-- docs-check: refused -->\n`gpu=tpu` is refused.\n")
    cmds = documented(commands, [doc]) + documented(overrides, [doc])
    failures = failures_of(cmds)
    assert [f.split(":")[1] for f in failures] == ["4", "7", "9"], failures
    assert "no_such_key" in failures[0] and "--no-such-flag" in failures[1]
    assert "batch_sizes" in failures[2] and "max_batch_size" in failures[2]
