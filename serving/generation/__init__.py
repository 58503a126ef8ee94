"""What the generative servers tierbench launches share: their settings' base, the backend base that reaches them
through their OpenAI-compatible API, and the in-process ceiling of the engine they run."""
