"""The `vllm serve` command line of a set of settings: what the host runs and what the deploy file says, from one
function, so the script a user runs is the server that was measured."""

from __future__ import annotations

import shlex
from typing import Any

from serving.vllm_engine import cli_args

DEPLOY_PORT = 8000  # vLLM's default port, for the exported script


def serve_command(vllm: str, folder: str, served_name: str, host: str, port: int | str,
                  engine_args: dict[str, Any]) -> list[str]:
    """`vllm serve <folder> --served-model-name <name> --host <host> --port <port> <engine flags>`."""
    return [vllm, "serve", folder, "--served-model-name", served_name, "--host", host, "--port", str(port),
            *cli_args(engine_args)]


def deploy_script(entry: str, served_name: str, folder: str, host: str, engine_args: dict[str, Any],
                  random_weights: bool) -> str:
    """`vllm-serve.sh`: the measured server's command line, its folder overridable with $MODEL."""
    command = serve_command("vllm", "__MODEL__", served_name, host, DEPLOY_PORT, engine_args)
    line = shlex.join(command).replace("__MODEL__", '"$MODEL"')
    if random_weights:
        note = (f"# The measured server ran random weights (--load-format dummy): the model's architecture only, from\n"
                f"# {folder} (config.json and a tokenizer). To serve the real model, set MODEL to its folder (or its\n"
                f"# Hugging Face name) and drop --load-format dummy and --seed from the line below.\n")
    else:
        note = "# MODEL: the folder the measured server loaded (on the measured node); point it at your copy.\n"
    return (f"#!/usr/bin/env bash\n# vLLM serving {served_name} with the settings of backend entry {entry}.\n{note}"
            f"set -euo pipefail\nMODEL=${{MODEL:-{shlex.quote(folder)}}}\nexec {line}\n")
