"""The node check with this machine's real probes (no GPU, ONNX Runtime's CPU session, the bundled Triton), the
refusals of a GPU tier without its GPU (runners.node, the tier job), Python versions, and `-m` anywhere."""

from __future__ import annotations

import glob
import subprocess
import sys
import tomllib

import pytest
from packaging.specifiers import SpecifierSet

from experiments.config.compose import load_config
from runners import SUPPORTED_PYTHON
from runners import node as node_cli
from runners.doctor import diagnose, render
from runners.doctor import main as doctor_main
from runners.sweep import overrides_first
from serving.paths import REPO_ROOT
from serving.pytorch.facts import TorchFacts
from serving.triton.facts import OnnxRuntimeFacts, TritonFacts
from tests.conftest import has_gpu

cpu_machine = pytest.mark.skipif(has_gpu(), reason="asserts what a machine without a GPU has")


@pytest.fixture(scope="module")
def this_node():
    from serving.probe import describe_node

    return describe_node()


@cpu_machine
def test_the_probes_report_what_this_machine_really_has(this_node) -> None:
    import onnxruntime
    import ray

    node = this_node
    ort, triton, torch = node.facts(OnnxRuntimeFacts), node.facts(TritonFacts), node.facts(TorchFacts)
    assert not node.has_gpu and node.gpu_problem, "NVML says why there is no GPU"
    assert ort.version == onnxruntime.__version__
    assert "CPUExecutionProvider" in ort.loaded, "a real session on the tiny model loaded"
    assert "CUDAExecutionProvider" not in ort.usable
    assert triton.bundled.startswith("nvidia-pytriton 0.7.0") and triton.bundled_problem is None
    assert f"stub for {sys.version_info.major}.{sys.version_info.minor}" in triton.bundled
    assert not triton.native and node.ray_version == ray.__version__
    assert node.python_version.startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert torch.version and not torch.cuda and torch.problem is None, "no GPU: nothing to explain"


@cpu_machine
def test_the_local_tier_runs_the_cpu_variants_and_skips_the_gpu_ones_with_the_sweeps_reasons(this_node) -> None:
    diagnosis = diagnose(this_node, "local")
    verdicts = {v.variant: v for v in diagnosis.verdicts}
    assert set(verdicts) == set(load_config().backends), "every variant in conf/backends/"
    assert verdicts["pytorch"].runs and verdicts["pytorch"].detail.endswith("on cpu")
    assert verdicts["triton_onnx"].runs and "bundled Triton" in verdicts["triton_onnx"].detail
    assert "CPUExecutionProvider" in verdicts["triton_onnx"].detail
    for gpu_only in ("triton_trt", "triton_trt_fp16", "pytorch_fp16"):
        verdict = verdicts[gpu_only]
        assert not verdict.runs and "needs" in verdict.detail and "GPU" in verdict.detail, gpu_only
    assert diagnosis.ok
    table = render(this_node, diagnosis)
    width = max(len(name) for name in verdicts)  # the variant column is as wide as the longest name
    assert "OK: this node can serve tier local" in table
    assert f"  {'triton_trt_fp16':<{width}}  skipped  (as triton_trt)" in table
    for row in ("Python", "Ray", "GPU", "CPU", "torch", "ONNX Runtime", "Triton", "FastAPI", "TorchServe",
                "Load engine"):
        assert f"\n  {row} " in table
    assert table.count("\n  torch ") == 1, "a row several backends share, once"
    assert "Java 17" in table.split("\n  TorchServe ")[1].splitlines()[0]
    for variant in ("fastapi", "torchserve", "torchserve_batched"):
        assert verdicts[variant].runs, verdicts[variant].detail


@cpu_machine
def test_the_cpu_row_says_whether_other_work_is_running(this_node) -> None:
    from dataclasses import replace

    from runners.doctor import node_rows

    def cpu(busy: float | None) -> tuple[str, str, str]:
        return next(row for row in node_rows(replace(this_node, cpu_busy_cores=busy, cpu_count=2)) if row[0] == "CPU")

    assert cpu(0.02) == ("CPU", "0.0 of 2 busy", "idle enough to measure on")
    assert cpu(1.9) == ("CPU", "1.9 of 2 busy", "other work is running: a sweep started now measures its servers "
                                               "beside it")
    assert cpu(None)[1] == "unknown"


def test_a_gpu_tier_on_this_machine_is_not_ok_and_names_the_gpu_found(this_node) -> None:
    diagnosis = diagnose(this_node, "a100")
    # An endpoint's server is elsewhere: it is the one variant this node can measure on any tier.
    launched = [v for v in diagnosis.verdicts if v.variant != "endpoint"]
    assert not diagnosis.ok and launched and not any(v.runs for v in launched)
    assert "needs a GPU named 'NVIDIA A100-SXM4-80GB'" in diagnosis.tier_problem
    assert "no NVIDIA GPU" in diagnosis.tier_problem
    assert "NOT OK: this node cannot serve tier a100" in render(this_node, diagnosis)
    assert diagnose(this_node, "a100", emulated=True).ok, "an emulated node stands in for the tier on purpose"


@pytest.mark.slow
@cpu_machine
def test_the_doctor_command_exits_non_zero_for_a_tier_the_node_cannot_serve(capsys: pytest.CaptureFixture) -> None:
    assert doctor_main([]) == 0 and "on tier local:" in capsys.readouterr().out
    refused = subprocess.run([sys.executable, "-m", "runners.doctor", "--tier", "h100"], cwd=REPO_ROOT,
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "NOT OK: this node cannot serve tier h100" in refused.stdout


@cpu_machine
def test_runners_node_refuses_a_gpu_tier_without_its_gpu_before_ray_starts(capsys: pytest.CaptureFixture) -> None:
    code = node_cli.main(["--address", "127.0.0.1:9", "--tier", "a100"])  # not a dry run: would start Ray if let
    err = capsys.readouterr().err
    assert code == 2
    assert "--tier a100: tier a100 (NVIDIA A100 SXM4 80GB) needs a GPU named 'NVIDIA A100-SXM4-80GB'" in err
    assert "this node has no NVIDIA GPU" in err and "--emulated" in err


@cpu_machine
def test_runners_node_checks_an_emulated_node_with_the_doctor_then_declares_it(capsys: pytest.CaptureFixture) -> None:
    assert node_cli.main(["--address", "127.0.0.1:9", "--tier", "rtx4090", "--emulated", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "on tier rtx4090:" in out and "OK: this node can serve tier rtx4090" in out, "the doctor ran first"
    assert '--resources={"tier_rtx4090":1.0,"tierbench_node":1.0,"tierbench_emulated":1.0}' in out


def test_supported_pythons_are_pyprojects_requires_python() -> None:
    requires = SpecifierSet(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    for minor in range(8, 16):
        assert requires.contains(f"3.{minor}.0") == ((3, minor) in SUPPORTED_PYTHON), minor


@pytest.mark.parametrize("python", sorted(glob.glob(str(REPO_ROOT.home() / ".pyenv/versions/3.1[03].*/bin/python")))
                         or [pytest.param("", marks=pytest.mark.skip(reason="no pyenv Python 3.10 / 3.13 here"))])
@pytest.mark.slow
def test_a_checkout_run_by_an_unsupported_python_stops_with_one_line(python: str) -> None:
    proc = subprocess.run([python, "-m", "runners.sweep"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0], "one line"
    assert f"tierbench runs on Python 3.11 or 3.12 and this is Python {version}" in proc.stderr


@pytest.mark.parametrize("argv,expected", [
    (["gpu=a,b", "-m", "experiment.batch_sizes=[1]"], ["gpu=a,b", "experiment.batch_sizes=[1]", "-m"]),
    (["-m", "gpu=a,b"], ["-m", "gpu=a,b"]),
    (["gpu=a", "--multirun", "--config-name", "config", "x=1"], ["gpu=a", "x=1", "--multirun", "--config-name",
                                                                  "config"]),
    (["--cfg", "job", "gpu=a"], ["--cfg", "job", "gpu=a"]),
])
def test_overrides_may_follow_the_multirun_flag(argv: list[str], expected: list[str]) -> None:
    assert overrides_first(argv) == expected


@pytest.mark.slow
@cpu_machine
def test_the_tier_job_refuses_a_node_declaring_a_gpu_tier_it_lacks(tmp_path, no_leftover_processes,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that joined as a100 anyway (say with --skip-doctor): the job refuses it before any server, client
    actor or MLflow run, naming the node's GPU and the tier."""
    import ray

    from experiments.cluster.connection import TierMismatchError
    from experiments.cluster.tiers import node_declaration
    from experiments.run.sweep import run_sweep

    store = tmp_path / "mlflow.db"
    cfg = load_config(["gpu=a100", "cluster=address", f"results_dir={tmp_path}",
                          f"mlflow.tracking_uri=sqlite:///{store}"])
    # ray.init writes these into os.environ: restored after the test, so later tests' subprocesses do not inherit
    # them (RAY_AUTH_MODE is the session's, tests/conftest.py).
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    for key in ("RAY_CLIENT_MODE", "PYTHONBREAKPOINT"):
        monkeypatch.delenv(key, raising=False)
    ray.init(address="local", num_cpus=1, resources=node_declaration(["a100"]), include_dashboard=False,
             namespace="tierbench")  # its own Ray, not one the machine advertises
    try:
        with pytest.raises(TierMismatchError) as refused:
            run_sweep(cfg)
        assert not ray.util.list_named_actors(all_namespaces=True), "no server or client actor was started"
    finally:
        ray.shutdown()
    message = str(refused.value)
    assert "gpu=a100: node" in message and "declares tier a100, but tier a100 (NVIDIA A100 SXM4 80GB) needs a GPU " \
        "named 'NVIDIA A100-SXM4-80GB' with 79-81 GiB, and this node has no NVIDIA GPU" in message
    assert "Nothing was started" in message
    assert not store.exists(), "no MLflow run"
    assert not list(tmp_path.glob("*/a100/trials")), "no trial records"
