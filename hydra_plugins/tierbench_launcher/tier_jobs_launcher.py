"""The launcher of a multirun's tier jobs: hydra-ray-launcher's, which runs each job as a Ray task, plus a clean
stop. On Ctrl-C (or SIGTERM) in the driver the library's launcher just lets go of its tasks, and a tier job killed
with its owner never runs its cleanup: its Ray Serve app (detached) would stay deployed and hold its GPU node,
which an autoscaler then never lets go. Here each running job is cancelled instead, which raises KeyboardInterrupt
inside it, so it stops its servers and client actors and releases its node as a job interrupted on its own does;
the driver waits for that (bounded) before it exits."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_ray_launcher import _core
from hydra_plugins.hydra_ray_launcher.ray_launcher import RayLauncher

log = logging.getLogger("tierbench")
STOP_TIMEOUT_S = 120.0  # a tier job stops its servers in seconds; a stuck one is left to Ray after this


class TierJobsLauncher(RayLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        jobs: list[Any] = []
        launch_job = _core.launch_job_on_ray

        def launch_and_keep(*args: Any, **kwargs: Any) -> Any:
            ref = launch_job(*args, **kwargs)
            jobs.append(ref)
            return ref

        _core.launch_job_on_ray = launch_and_keep  # the library's loop, with the job refs kept for a clean stop
        try:
            return _core.launch(launcher=self, job_overrides=job_overrides, initial_job_idx=initial_job_idx)
        except KeyboardInterrupt:
            stop_jobs(jobs)
            raise
        finally:
            _core.launch_job_on_ray = launch_job


def stop_jobs(jobs: list[Any], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Cancel the tier jobs still running (KeyboardInterrupt inside each) and wait for them to clean up."""
    import ray

    running = []
    for ref in jobs:
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            running.append(ref)
            ray.cancel(ref)
    if not running:
        return
    log.warning("interrupted: stopping %d tier job(s); each stops its servers and releases its node "
                "(up to %.0f s)", len(running), timeout_s)
    _, stuck = ray.wait(running, num_returns=len(running), timeout=timeout_s)
    if stuck:
        log.error("%d tier job(s) did not stop within %.0f s; Ray ends them with this driver, and a Ray Serve app "
                  "they deployed may outlive them: `serve status` on the cluster lists it", len(stuck), timeout_s)
