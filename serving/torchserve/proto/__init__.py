"""TorchServe's inference gRPC API (`inference.proto`, from TorchServe's own jar) and its generated modules."""
