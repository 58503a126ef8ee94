"""Describe the node this runs on: what every backend shares (hardware, Python, Ray) and each registered backend
package's own facts, probed here by the package's own code. Runs inside a Ray task placed on the node, or in
`python -m runners.doctor`; the `NodeInfo` travels back to the driver."""

from __future__ import annotations

import os
import platform
import socket

from serving.node import NodeInfo, busy_cores, cpu_model, nvml_gpus, ray_node_gpus


def describe_node() -> NodeInfo:
    """This node as a sweep sees it, probed here: hardware, Python, Ray, and every backend package's facts."""
    import ray

    from serving.registry import node_fact_kinds

    gpus = nvml_gpus()
    node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    try:
        import ray.util

        ip = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray
        ip = "127.0.0.1"
    return NodeInfo(
        hostname=socket.gethostname(),
        ip=ip,
        ray_node_id=node_id,
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        gpu_names=gpus.names,
        gpu_memory_mib=gpus.memory_mib,
        gpu_mig_enabled=gpus.mig_enabled,
        mig_devices=gpus.mig_devices,
        visible_devices=gpus.visible_devices,
        driver_version=gpus.driver_version,
        cuda_version=gpus.cuda_version,
        gpu_problem=gpus.problem,
        python_version=platform.python_version(),
        ray_version=ray.__version__,
        ray_gpus=ray_node_gpus(node_id),
        stack={kind.KEY: kind.probe() for kind in node_fact_kinds()},
        cpu_busy_cores=busy_cores(),  # last: the probes above (torch's import) are this process's own work
    )
