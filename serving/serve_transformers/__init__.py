"""A language model in transformers behind Ray Serve: the generative baseline that runs on a CPU as on a GPU."""
