"""Generative text: conversations sent to an OpenAI-compatible server, measured per token (time to first token,
inter-token latency, time per output token) and priced per million tokens."""
