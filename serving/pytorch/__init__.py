"""What the servers that run the model in PyTorch share (Ray Serve, FastAPI, TorchServe): the model on its device
(`runner`), the settings of how it runs (`settings`), what a node's torch can do (`facts`), the service around it
(`service`, `backend`) and its batcher `when_free`. Not a backend: the backend packages build on it."""
