"""PyTorch behind Ray Serve (HTTP and gRPC ingresses speaking the Open Inference Protocol): its registry entry
(serving/registry.py)."""

from __future__ import annotations

from serving.node import NodeInfo
from serving.package import BackendPackage, DoctorRow
from serving.pytorch.facts import TorchFacts, torch_row
from serving.pytorch.inprocess import TorchCaller
from serving.ray_serve.cluster import CLUSTER_SWITCHES, RAY_NODE_ENVIRONMENT, cluster_environment, joined_cluster
from serving.ray_serve.settings import RayServeTorchSettings
from serving.runtime import Engine


def doctor_rows(node: NodeInfo) -> list[DoctorRow]:
    return [torch_row(node)]


PACKAGE = BackendPackage(name="ray_serve", settings=RayServeTorchSettings,
                         process_names=("ServeReplica", "ServeController"),  # Ray actors named after Serve's classes
                         facts=(TorchFacts,), doctor_rows=doctor_rows, ray_node_environment=RAY_NODE_ENVIRONMENT,
                         cluster_environment=cluster_environment, joined_cluster=joined_cluster,
                         cluster_switches=CLUSTER_SWITCHES, runtime_callers={Engine.TORCH: TorchCaller})
