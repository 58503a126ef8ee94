"""Workloads: what a sweep sends and in what unit it is priced. Each is a package (`serving/workloads/<name>/`)
registered by one line of `serving/workloads/registry.py`: image classification (images, $ per 1k images) and
generative text (tokens, $ per 1M tokens)."""
