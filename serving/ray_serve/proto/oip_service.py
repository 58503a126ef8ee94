"""The Open Inference Protocol's gRPC service, `inference.GRPCInferenceService`, as tritonclient ships it, made
picklable for Ray Serve: Serve's gRPC proxy pickles each request message to hand it to a replica.

tritonclient's `service_pb2` and `model_config_pb2` declare their messages in modules named `grpc_service_pb2` and
`model_config_pb2` (protoc's names, before the wheel moved them into `tritonclient.grpc`), which pickle cannot import.
Importing this module registers those names: in the proxy, which imports the servicer function from here
(`add_GRPCInferenceServiceServicer_to_server`, given to `serve.start`), and in the replica, whose deployment imports
this module.
"""

from __future__ import annotations

import sys

from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

for _module, _message in ((service_pb2, service_pb2.ModelInferRequest),
                          (model_config_pb2, model_config_pb2.ModelConfig)):
    sys.modules.setdefault(_message.__module__, _module)  # "grpc_service_pb2", "model_config_pb2"

add_GRPCInferenceServiceServicer_to_server = service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server

__all__ = ["add_GRPCInferenceServiceServicer_to_server", "model_config_pb2", "service_pb2"]
