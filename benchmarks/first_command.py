"""Fresh clone to the answer: README's first set-up command, timed as a newcomer meets it.

    python benchmarks/first_command.py [--runs 1] [--python python3] [--keep] [--bytecode inherit|write|no-write]
                                       [--cache warm|cold]

Each run clones this checkout's HEAD into a new temporary folder and runs README's first command there, exactly as
written, in two timed halves: the install (`python3 -m venv ... && uv pip install ...`) and the sweep
(`python -m runners.sweep`), split where the command itself chains them. `--cache warm` (the default) keeps the
package caches this machine has (a newcomer's second install; CI's); `--cache cold` gives pip and uv new, empty ones,
so every package is downloaded, as on a newcomer's first machine. The sweep's exit code,
its trial counts and whether it ended with the answer block are checked, not assumed. Goal: 6 minutes in all on
this 2-core machine. The clone is deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import report  # noqa: E402
from serving.paths import REPO_ROOT  # noqa: E402

GOAL_S = 360.0
SWEEP = "python -m runners.sweep"
ANSWER = "Cheapest operating point"


def readme_command() -> str:
    """The first ```bash block under README's "## Set up": the command a newcomer copies."""
    setup = (REPO_ROOT / "README.md").read_text().split("## Set up", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", setup, re.S).group(1).strip()


def timed(command: str, cwd: Path, log: Path, env: dict[str, str]) -> tuple[int, float]:
    start = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env=env).returncode
    return code, time.monotonic() - start


def one_run(command: str, python: str, keep: bool, env: dict[str, str], cold_cache: bool) -> dict:
    install, sweep = command.rsplit(" && ", 1)
    if sweep != SWEEP:
        raise SystemExit(f"README's first command no longer ends with `{SWEEP}`: {command!r}")
    install = install.replace("python3 -m venv", f"{python} -m venv", 1)
    folder = Path(tempfile.mkdtemp(prefix="first-command-"))
    try:
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(folder / "repo")], check=True)
        repo = folder / "repo"
        if cold_cache:  # an empty cache of this run's own, deleted with the clone
            env = {**env, "UV_CACHE_DIR": str(folder / "uv-cache"), "PIP_NO_CACHE_DIR": "1"}
        install_code, install_s = timed(install, repo, folder / "install.log", env)
        if install_code != 0:
            raise SystemExit(f"the install failed ({install_code}): see {folder / 'install.log'}")
        sweep_code, sweep_s = timed(f". .venv/bin/activate && {SWEEP}", repo, folder / "sweep.log", env)
        text = (folder / "sweep.log").read_text()
        counts = re.search(r"(\d+) trials \((\d+) ok, (\d+) failed, (\d+) skipped\)", text)
        total_s = install_s + sweep_s
        answered = sweep_code == 0 and ANSWER in text  # a failed sweep meets no goal, however quick
        return {"install_s": round(install_s, 1), "sweep_s": round(sweep_s, 1), "total_s": round(total_s, 1),
                "goal_met": answered and total_s <= GOAL_S, "sweep_exit": sweep_code, "answer_printed": ANSWER in text,
                "trials": counts.group(0) if counts else "no report line", "folder": str(folder) if keep else "deleted"}
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--python", default="python3", help="the interpreter README's `python3` stands for")
    parser.add_argument("--keep", action="store_true", help="keep each clone and its logs")
    parser.add_argument("--bytecode", choices=["inherit", "write", "no-write"], default="inherit",
                        help="PYTHONDONTWRITEBYTECODE for the command: as this shell has it, unset (Python caches the "
                             "bytecode it compiles, as on most laptops) or 1 (many Docker images: every process "
                             "compiles what it imports, every time, when installed without bytecode)")
    parser.add_argument("--cache", choices=["warm", "cold"], default="warm",
                        help="warm: this machine's pip and uv caches; cold: new empty ones (every package downloaded)")
    args = parser.parse_args()
    command = readme_command()
    env = dict(os.environ)
    if args.bytecode == "write":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    elif args.bytecode == "no-write":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    no_write = env.get("PYTHONDONTWRITEBYTECODE", "")
    print(f"README command 1: {command}\nPYTHONDONTWRITEBYTECODE={no_write!r}\n")
    rows = [{"run": i + 1, "cache": args.cache, "dont_write_bytecode": no_write or "-",
             **one_run(command, args.python, args.keep, env, args.cache == "cold")} for i in range(args.runs)]
    report("first_command", ["run", "cache", "dont_write_bytecode", "install_s", "sweep_s", "total_s", "goal_met",
                             "sweep_exit", "answer_printed", "trials"], rows,
           {"command": command, "goal_s": GOAL_S, "python": args.python, "bytecode": args.bytecode,
            "cache": args.cache})


if __name__ == "__main__":
    main()
