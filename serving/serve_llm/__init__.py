"""Ray Serve LLM (`ray.serve.llm`): vLLM inside Serve replicas behind Serve LLM's OpenAI-compatible ingress, started
as one Serve app per server group, measured per token by the generative workload."""
