"""TorchServe serving the model in PyTorch: a handler of tierbench's own (`handler.py`) in TorchServe's Python
workers, behind its Java frontend's REST and gRPC APIs, from a `TorchServeHost` actor on the tier's node."""
