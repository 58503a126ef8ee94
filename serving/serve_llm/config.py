"""Serve LLM's configuration of a set of settings: the `LLMConfig` (as the dict `ray.serve.llm.LLMConfig` validates;
building the object needs vLLM installed) that tierbench deploys, and the Serve config file (`serve deploy`) that
deploys the same outside it, from one function."""

from __future__ import annotations

from typing import Any

import yaml

from serving.serve_llm.settings import ServeLlmSettings

IMPORT_PATH = "ray.serve.llm:build_openai_app"
DEPLOY_FILE = "serve-llm.yaml"


def deployment_config(settings: ServeLlmSettings, shutdown: dict[str, float] | None = None) -> dict[str, Any]:
    """The replicas' Serve options: their number (or autoscaling), requests per replica, and `shutdown` (the
    measured app's faster stop; a deployed one keeps Serve's defaults)."""
    s = settings
    if s.autoscaling:
        scaling: dict[str, Any] = {"min_replicas": s.min_replicas, "max_replicas": s.max_replicas,
                                   "initial_replicas": s.min_replicas}
        if s.target_ongoing_requests is not None:
            scaling["target_ongoing_requests"] = float(s.target_ongoing_requests)
        config: dict[str, Any] = {"autoscaling_config": scaling}
    else:
        config = {"num_replicas": s.num_replicas}
    if s.max_ongoing_requests is not None:
        config["max_ongoing_requests"] = s.max_ongoing_requests
    return {**config, **(shutdown or {})}


def llm_config(settings: ServeLlmSettings, model_id: str, model_source: str, engine_args: dict[str, Any],
               resources: dict[str, float] | None = None, shutdown: dict[str, float] | None = None) -> dict[str, Any]:
    """The `LLMConfig` of these settings serving `model_source` (a folder on the replicas' node) as `model_id`.
    `resources`: custom resources the replica asks for besides its GPUs (the tier's), which Serve LLM adds to the
    first bundle of the replica's placement group; its bundles, one per engine rank, are packed on one node."""
    config = deployment_config(settings, shutdown)
    if resources:
        config["ray_actor_options"] = {"resources": dict(resources)}
    out: dict[str, Any] = {
        "model_loading_config": {"model_id": model_id, "model_source": model_source},
        "engine_kwargs": dict(engine_args),
        "deployment_config": config,
        "placement_group_config": {"bundles": [{"GPU": float(settings.num_gpus)}] * settings.tensor_parallel_size,
                                   "strategy": "STRICT_PACK"},
    }
    if settings.accelerator_type:
        out["accelerator_type"] = settings.accelerator_type
    return out


def serving_args(config: dict[str, Any], resources: dict[str, float] | None = None) -> dict[str, Any]:
    """`build_openai_app`'s argument: the model's `LLMConfig`, and the ingress's placement (beside the replicas)."""
    args: dict[str, Any] = {"llm_configs": [config]}
    if resources:
        args["ingress_deployment_config"] = {"ray_actor_options": {"resources": dict(resources)}}
    return args


def serve_yaml(entry: str, app_name: str, route: str, config: dict[str, Any], random_weights: bool) -> str:
    """`serve-llm.yaml`: a Serve config (`serve deploy serve-llm.yaml` / `serve run serve-llm.yaml`) of the measured
    settings."""
    note = (f"# Ray Serve LLM with the settings of backend entry {entry}: serve run {DEPLOY_FILE}\n")
    if random_weights:
        note += ("# The measured app ran random weights (load_format: dummy): model_source is the architecture only\n"
                 "# (config.json and a tokenizer). To serve the real model, point model_source at its folder (or its\n"
                 "# Hugging Face name) and drop load_format and seed from engine_kwargs.\n")
    document = {"applications": [{"name": app_name, "route_prefix": route, "import_path": IMPORT_PATH,
                                  "args": {"llm_configs": [config]}}]}
    return note + yaml.safe_dump(document, sort_keys=False)
