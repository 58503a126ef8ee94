"""The MLflow UI in a real browser: `mlflow server` on 127.0.0.1 over a store holding a finished SYNTHETIC sweep
(tests/synthetic_sweep.py) with its report, opened in headless Chromium (Debian's `chromium`, driven by
Playwright). Checks that the sweep -> tier -> trial runs are listed with readable names, that the sweep run
links its report and that the report renders in MLflow's artifact view. Screenshots are kept in the pytest
temp folder (their paths are printed; `pytest -s` shows them)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.report.build import ReportOptions
from experiments.report.publish import make_report
from tests import synthetic_sweep as syn
from tests.helpers import premigrated_store

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
# Flags from shared/PLATFORM.md: without the background-networking ones Chromium keeps dialling out.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SERVER_START_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    """A synthetic finished sweep with its report, served by `mlflow server`; stopped whatever happens."""
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium: apt-get update && apt-get install -y chromium chromium-driver")
    pytest.importorskip("playwright.sync_api", reason="needs the Python playwright package (pip install '.[dev]')")
    tmp = tmp_path_factory.mktemp("ui")
    uri = premigrated_store(tmp / "mlflow")
    ids = syn.build(uri)
    make_report(uri, "tierbench", syn.SWEEP_ID, tmp / "runs", ReportOptions(slo_p99_ms=35.0))
    port = _free_port()
    log = open(tmp / "mlflow-server.log", "w")  # noqa: SIM115 - closed in finally
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        # No job runner: MLflow would put its queue in a /dev/shm temp folder it never removes.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mlflow server did not start: {(tmp / 'mlflow-server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield base, ids, tmp
    finally:
        _stop(server)
        log.close()


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group (uvicorn and its workers), SIGKILL what is left after 20 s."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(server.pid, signal.SIGKILL)


def test_runs_are_listed_and_the_report_is_linked(ui) -> None:
    from playwright.sync_api import sync_playwright

    base, ids, tmp = ui
    experiment = f"{base}/#/experiments/{ids['experiment_id']}"
    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{experiment}/runs?workflowType=machine_learning", wait_until="domcontentloaded")
            sweep_row = page.locator('[role="row"]', has_text=f"sweep {syn.SWEEP_ID}").first
            sweep_row.wait_for(timeout=90_000)
            sweep_row.locator("button").first.click()  # expand: the tier runs nest under the sweep run
            tier_row = page.locator('[role="row"]', has=page.get_by_text("a100", exact=True)).first
            tier_row.wait_for(timeout=30_000)
            assert page.get_by_text("rtx4090", exact=True).first.is_visible()
            tier_row.locator("button").first.click()  # expand a100: its trial runs
            page.get_by_text("a100/triton_onnx/grpc/tensor/b1/c1").first.wait_for(timeout=30_000)
            listed = page.get_by_text("a100/", exact=False).all_inner_texts()
            trial_names = {t for t in listed if t.startswith("a100/") and "/b" in t}
            assert len(trial_names) >= 8, listed  # the table virtualises rows: at least a screenful is drawn
            shots.append(tmp / "mlflow-ui-runs.png")
            page.screenshot(path=str(shots[-1]))

            page.goto(f"{experiment}/runs/{ids['sweep_run']}?workflowType=machine_learning",
                      wait_until="domcontentloaded")
            link = page.get_by_text("open report.html").first
            link.wait_for(timeout=60_000)
            assert link.get_attribute("href").endswith(f"runs/{ids['sweep_run']}/artifactPath/report/report.html"
                                                       "?workflowType=machine_learning")
            shots.append(tmp / "mlflow-ui-sweep-run.png")
            page.screenshot(path=str(shots[-1]))

            if link.get_attribute("target") == "_blank":  # MLflow opens description links in a new tab
                with page.context.expect_page() as new_tab:
                    link.click()
                page = new_tab.value
            else:
                link.click()
            deadline = time.monotonic() + 60
            while not any("Pareto frontier" in _text(f) for f in page.frames):
                assert time.monotonic() < deadline, "the report did not render in the artifact view"
                page.wait_for_timeout(500)
            shots.append(tmp / "mlflow-ui-report.png")
            page.screenshot(path=str(shots[-1]))
        finally:
            browser.close()
    for shot in shots:
        assert shot.stat().st_size > 20_000
        print(f"screenshot: {shot}")


def _text(frame) -> str:
    try:
        return frame.content()
    except Exception:  # noqa: BLE001 - a frame that is navigating has no content yet
        return ""
