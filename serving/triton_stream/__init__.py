"""Triton streaming a language model's tokens: a decoupled Python-backend model running transformers, reached through
Triton's generate endpoint (server-sent events), one response per token."""
