"""The wheelhouse for offline nodes: a small one built for another Python (3.12) than the one running (a pure
package, a compiled one, an sdist-only one, one the node keeps), its lock and checksums, its parts joined again,
and an offline install of it into a fresh venv of pyenv's 3.12 with no index reachable. The full wheelhouse is a
script run and quoted (docs/offline-nodes.md), not a test: it downloads gigabytes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from offline.project import Project
from offline.resolve import Keep, Package, leave_out_kept
from offline.target import Target, TargetError, check_extras
from offline.wheelhouse import build, split
from runners import wheelhouse as cli

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTHON_312 = Path.home() / ".pyenv/versions/3.12.1/bin/python3.12"
TARGET = Target("3.12", "manylinux_2_35_x86_64", None)
# A pure wheel, a compiled one (cp312 wheels), an sdist-only pure one (hydra-core's), and requests, whose urllib3
# the "node" keeps below.
TOY_PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
[project]
name = "toy"
version = "0.1"
requires-python = ">=3.11"
dependencies = ["six==1.17.0", "pyyaml>=6.0.3", "antlr4-python3-runtime==4.9.3", "requests==2.32.3"]
[project.optional-dependencies]
extra = ["toy[inner]"]
inner = ["idna>=3"]
[tool.setuptools]
py-modules = ["toy"]
"""


def package(name: str, *requires: str) -> Package:
    return Package(name, "1", f"https://example/{name}.whl", "", requires)


def held_names(packages: list[Package]) -> set[str]:
    return {p.name for p in packages}


def test_what_the_node_keeps_is_left_out_with_what_only_it_needs():
    packages = [package("app", "torch>=2", "numpy", "ort[cuda]"), package("torch", "nvidia-cudnn", "filelock"),
                package("numpy"), package("ort", "numpy", 'nvidia-cuda-runtime; extra == "cuda"'),
                package("nvidia-cudnn"), package("nvidia-cuda-runtime"), package("filelock"),
                package("colorama", 'pywin; sys_platform == "win32"'), package("pywin")]
    roots = [Requirement("app"), Requirement('colorama; python_version >= "3.12"')]
    held, kept = leave_out_kept(packages, roots, [Keep.parse("torch==2.11.0+cu130")], TARGET)
    assert {p.name for p in held} == {"app", "numpy", "ort", "nvidia-cuda-runtime", "colorama"}
    assert {p.name for p in kept} == {"torch", "nvidia-cudnn", "filelock", "pywin"}
    # a glob keeps every match, even one another package needs too, but never a root (nvidia-pytriton)
    held, _ = leave_out_kept(packages + [package("nvidia-tool")], roots + [Requirement("nvidia-tool")],
                             [Keep.parse("nvidia-*")], TARGET)
    assert not {p.name for p in held} & {"nvidia-cudnn", "nvidia-cuda-runtime"} and "nvidia-tool" in held_names(held)
    # the version pins the resolution (public part: 2.11.0 matches the node's 2.11.0+cu130)
    assert Keep.parse("Torch==2.11.0+cu130").constraint == "torch==2.11.0"
    assert Keep.parse("nvidia-*").constraint is None


@pytest.mark.parametrize(("target", "words"), [
    (lambda: Target("312", "manylinux_2_35_x86_64", None), "--python '312'"),
    (lambda: Target("3.12", "win_amd64", None), "--platform 'win_amd64'"),
    (lambda: Target("3.12", "manylinux_2_35_x86_64", 11), "--cuda 11"),
    (lambda: Target("3.12", "manylinux_2_28_x86_64", 13), "nvidia-pytriton 0.7.0.* glibc 2.35 and newer"),
])
def test_a_target_no_node_has_is_refused_naming_the_option(target, words):
    with pytest.raises(TargetError, match=words):
        target()


def test_a_node_of_glibc_2_35_takes_every_older_manylinux_wheel():
    tags = Target("3.12", "manylinux_2_35_x86_64", 13).compatible_platforms()
    assert tags[0] == "manylinux_2_35_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux1_x86_64" in tags
    assert "manylinux_2_36_x86_64" not in tags
    arm = Target("3.12", "manylinux_2_39_aarch64", 13).compatible_platforms()
    assert "manylinux2014_aarch64" in arm and "manylinux1_aarch64" not in arm


def test_extras_are_checked_against_the_project_and_the_nodes_cuda():
    project = Project.read(REPO_ROOT / "pyproject.toml")
    with pytest.raises(TargetError, match="--extra 'gpu-cu13' is built for CUDA 13 and the target is CUDA 12"):
        check_extras(["gpu-cu13"], 12, set(project.extras))
    with pytest.raises(TargetError, match="--extra 'gpu-cu14': pyproject.toml has no such extra"):
        check_extras(["gpu-cu14"], 13, set(project.extras))
    with pytest.raises(TargetError, match=r"--python .3.13.: tierbench needs Python <3.13,>=3.11"):
        project.check_python(Target("3.13", "manylinux_2_35_x86_64", 13))
    names = {r.name for r in project.requirements(["gpu-cu13"])}
    assert {"onnxruntime-gpu", "tensorrt-cu13", "ray", "setuptools"} <= names and "tierbench" not in names
    assert "tensorrt-cu13" not in {r.name for r in project.requirements(["ort-cu13"])}


def test_parts_are_at_most_the_size_asked_and_join_back(tmp_path):
    (tmp_path / "wheels").mkdir()
    blobs = {f"p{i}-1-py3-none-any.whl": os.urandom(700_000 + i) for i in range(4)}
    for name, data in blobs.items():
        (tmp_path / "wheels" / name).write_bytes(data)
    for name in ("wheelhouse.lock.json", "SHA256SUMS", "requirements.txt"):
        (tmp_path / name).write_text("{}")
    parts = split(tmp_path, 1)
    assert len(parts) >= 3 and all(part["bytes"] <= 1024 * 1024 for part in parts)
    joined = tmp_path / "joined.tar"
    joined.write_bytes(b"".join((tmp_path / "parts" / part["file"]).read_bytes() for part in parts))
    with tarfile.open(joined) as archive:
        assert {name: archive.extractfile(f"wheels/{name}").read() for name in blobs} == blobs
    sums = (tmp_path / "parts" / "SHA256SUMS").read_text().splitlines()
    assert sums == [f"{hashlib.sha256((tmp_path / 'parts' / p['file']).read_bytes()).hexdigest()}  {p['file']}"
                    for p in parts]


def test_the_cli_refuses_bad_options_before_resolving(capsys):
    assert cli.main(["--python", "3.12", "--cuda", "12", "--extra", "gpu-cu13", "--out", "/nonexistent/x"]) == 2
    assert "--extra 'gpu-cu13' is built for CUDA 13" in capsys.readouterr().err
    assert cli.main(["--python", "3.12", "--cuda", "twelve"]) == 2
    assert "--cuda 'twelve'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--python", "3.12", "--split-mib", "0"])
    assert "--split-mib 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not PYTHON_312.exists(), reason=f"needs pyenv's Python 3.12 ({PYTHON_312})")
def test_a_small_wheelhouse_for_312_installs_offline_into_a_fresh_venv(tmp_path):
    toy = tmp_path / "toy"
    toy.mkdir()
    (toy / "pyproject.toml").write_text(TOY_PYPROJECT)
    (toy / "toy.py").write_text("import antlr4, idna, requests, six, yaml\n")
    out = tmp_path / "wheelhouse"
    lock = build(Project.read(toy / "pyproject.toml"), TARGET, ["extra"], [Keep.parse("urllib3")], out, [],
                 split_mib=1, say=lambda line: None)
    names = {wheel.name for wheel in lock.wheels}
    assert {"six", "pyyaml", "antlr4-python3-runtime", "requests", "idna", "setuptools"} <= names
    assert "urllib3" not in names and "left out: urllib3" in " ".join(lock.kept)
    assert lock.built_from_sdist == ["antlr4_python3_runtime-4.9.3-py3-none-any.whl"]
    assert any("cp312" in wheel.file and "manylinux" in wheel.file for wheel in lock.wheels if wheel.name == "pyyaml")
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=out).returncode == 0
    recorded = json.loads((out / "wheelhouse.lock.json").read_text())
    assert recorded["total_bytes"] == sum(wheel.bytes for wheel in lock.wheels) > 0
    assert lock.parts and all(part["bytes"] <= 1024 * 1024 for part in lock.parts)

    # The node: the parts joined, a fresh 3.12 venv that has what it keeps (urllib3, here from the wheelhouse's
    # own pip download), then the install with no index reachable.
    node = tmp_path / "node"
    node.mkdir()
    joined = b"".join((out / "parts" / part["file"]).read_bytes() for part in lock.parts)
    (node / "wheelhouse.tar").write_bytes(joined)
    with tarfile.open(node / "wheelhouse.tar") as archive:
        archive.extractall(node, filter="data")
    venv = node / "venv"
    subprocess.run([str(PYTHON_312), "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "",
               "PIP_CONSTRAINT": ""}
    kept = subprocess.run([python, "-m", "pip", "download", "--no-deps", "-d", str(node / "image"),
                           "urllib3<3"], capture_output=True, text=True)
    assert kept.returncode == 0, kept.stderr
    subprocess.run([python, "-m", "pip", "install", "--no-index", *map(str, (node / "image").glob("*.whl"))],
                   env=offline, check=True, capture_output=True)
    install = subprocess.run([python, "-m", "pip", "install", "--no-index", "--find-links", str(node / "wheels"),
                              "-e", f"{toy}[extra]"], env=offline, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    imported = subprocess.run([python, "-c", "import toy, sys; print(sys.version_info[:2])"], capture_output=True,
                              text=True, cwd=tmp_path)
    assert imported.returncode == 0 and imported.stdout.strip() == "(3, 12)", imported.stderr
