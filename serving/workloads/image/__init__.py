"""Image classification: batches of images sent as tensors or encoded files, priced per thousand images."""
