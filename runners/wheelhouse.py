"""`python -m runners.wheelhouse --python 3.12 --cuda 13 [--extra gpu-cu13] [--keep-installed torch==2.11.0,...]
[--split-mib 60] [--out DIR]`: every wheel a node without a package index needs to install tierbench, resolved by
pip for that node's Python and platform, with a lock, checksums and (for transports with a size limit) parts.

On the node: `pip install --no-index --find-links DIR/wheels -e '<checkout>[extra]'` (docs/offline-nodes.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from offline.project import Project
from offline.resolve import Keep, ResolutionError
from offline.target import DEFAULT_PLATFORM, Target, TargetError, default_extra
from offline.wheelhouse import LOCK_FILE, MIB, build

PROJECT_DIR = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runners.wheelhouse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the node's Python, major.minor (e.g. 3.12)")
    parser.add_argument("--cuda", default="none",
                        help="the CUDA major of the node's driver (12 or 13; `none` for a CPU node)")
    parser.add_argument("--platform", default=DEFAULT_PLATFORM,
                        help="the node's platform tag, manylinux_2_<glibc minor>_<x86_64|aarch64> (glibc >= 2.35: "
                             f"`ldd --version` on the node; default {DEFAULT_PLATFORM})")
    parser.add_argument("--extra", action="append", default=None,
                        help="an extra of tierbench to install (repeatable; default: gpu-cu<N> for --cuda N, else "
                             "cpu); ort-cu<N> is ONNX Runtime without TensorRT, for builds that cannot reach "
                             "NVIDIA's index")
    parser.add_argument("--keep-installed", action="append", default=[], metavar="NAME[==VERSION],...",
                        help="packages the node's image already has (names, globs like nvidia-*, or name==version "
                             "to resolve the rest against that version); they and what only they need are left "
                             "out. @FILE reads a `pip freeze` of the node")
    parser.add_argument("--build-python", default=None,
                        help="a Python of the node's version on this machine, to compile wheels PyPI lacks for the "
                             "node (default: python<version> on PATH or pyenv's)")
    parser.add_argument("--out", type=Path, default=None, help="the folder (default: wheelhouse/<target>)")
    parser.add_argument("--split-mib", type=int, default=None,
                        help="also pack it into parts/ of at most this many MiB (transports with a size limit)")
    parser.add_argument("--index-url", default=None, help="passed to pip (default: pip's own configuration)")
    parser.add_argument("--extra-index-url", action="append", default=[], help="passed to pip (repeatable)")
    parser.add_argument("--find-links", action="append", default=[], help="passed to pip (repeatable)")
    args = parser.parse_args(argv)
    if args.split_mib is not None and args.split_mib < 1:
        parser.error(f"--split-mib {args.split_mib}: a part holds at least 1 MiB; give the transport's limit "
                     "less some room, e.g. --split-mib 60 for 64 MiB")
    return args


def keep_rules(values: list[str]) -> list[Keep]:
    rules = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if item.startswith("@"):
                lines = Path(item[1:]).read_text().splitlines()
                rules.extend(Keep.parse(line) for line in lines if "==" in line and not line.startswith("#"))
            elif item:
                rules.append(Keep.parse(item))
    return rules


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cuda = None if args.cuda.lower() in ("none", "cpu", "0") else int(args.cuda)
    except ValueError:
        print(f"error: --cuda {args.cuda!r}: the driver's CUDA major (12 or 13) or `none`", file=sys.stderr)
        return 2
    pip_args = [*(["--index-url", args.index_url] if args.index_url else []),
                *(f"--extra-index-url={url}" for url in args.extra_index_url),
                *(f"--find-links={path}" for path in args.find_links)]
    try:
        target = Target(args.python, args.platform, cuda, args.build_python)
        extras = args.extra or [default_extra(cuda)]
        out = (args.out or PROJECT_DIR / "wheelhouse" / target.slug).resolve()
        lock = build(Project.read(PROJECT_DIR / "pyproject.toml"), target, extras,
                     keep_rules(args.keep_installed), out, pip_args, args.split_mib)
    except (TargetError, ResolutionError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    largest = sorted(lock.wheels, key=lambda wheel: wheel.bytes, reverse=True)[:8]
    print(f"\nwheelhouse {out} ({target.slug}): {len(lock.wheels)} wheels, {lock.total_bytes / MIB:,.1f} MiB")
    for wheel in largest:
        print(f"  {wheel.bytes / MIB:9,.1f} MiB  {wheel.file}")
    if lock.parts:
        biggest = max(part["bytes"] for part in lock.parts) / MIB
        print(f"parts: {len(lock.parts)} in {out / 'parts'} (largest {biggest:,.1f} MiB); on the node: "
              f"cat wheelhouse.tar.* | tar -x -C <folder>")
    print(f"lock: {out / LOCK_FILE}\non the node: {lock.install}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
