"""The Open Inference Protocol (KServe v2), as Triton speaks it: the one request shape every server that speaks it
takes (Triton, the Ray Serve deployment, the FastAPI service), so one client stack and one load engine drive them
all. `protocol`: the server side (models' metadata and config, requests decoded, responses encoded); `clients`: the
socket clients (HTTP with the binary tensor extension, gRPC `inference.GRPCInferenceService`)."""
