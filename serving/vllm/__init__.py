"""vLLM's own OpenAI-compatible server (`vllm serve`), started by a `VllmHost` actor on the tier's node in a process
group of its own (its engine core and workers go with it), measured per token by the generative workload."""
