"""The FastAPI service, as a team would write it: `uvicorn serving.fastapi.app:create_app --factory` with the file
named by `$TIERBENCH_FASTAPI_CONFIG` (the model config, device, options, batch sizes to warm up; what
`FastApiBackend.deploy_files` exports).

Routes:
- `POST /predict`: `{"images": ["<base64 JPEG>", ...]}` -> `{"logits": [[...], ...]}` (`jpeg_base64`, the 5-way
  study's request; `serving.workloads.image.json_images`), the body validated by a pydantic model as FastAPI does;
- the Open Inference Protocol over HTTP (`/v2/...`: the tensor model `<model>` and the JPEG model `<model>_jpeg`,
  binary tensor extension), the same routes Triton and the Ray Serve deployment answer;
- `GET /info`: how the model runs here (device, dtype, warm-up).

Every response to an inference carries `Server-Timing` (the service's own time and the forward pass's images). The
model is built and warmed up for every measured batch size in the app's startup, before uvicorn takes requests; each
worker process then writes `ready-<pid>` into `$TIERBENCH_FASTAPI_READY_DIR` (when set), so whoever started it
knows when every worker is ready.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel

from serving.clients.base import TIMING_HEADER
from serving.workloads.image import json_images

CONFIG_VARIABLE = "TIERBENCH_FASTAPI_CONFIG"
READY_DIR_VARIABLE = "TIERBENCH_FASTAPI_READY_DIR"
SERVER_NAME = "tierbench-fastapi"


class PredictRequest(BaseModel):
    """The study's request body: the batch's JPEG files, base64-encoded."""

    images: list[str]


def load_config(path: str | None = None) -> dict[str, Any]:
    path = path or os.environ.get(CONFIG_VARIABLE)
    if not path:
        raise RuntimeError(f"set {CONFIG_VARIABLE} to the service's config file (FastApiBackend.deploy_files writes "
                           "one: serving_config.json)")
    return json.loads(Path(path).read_text())


def create_app(config: dict[str, Any] | None = None) -> FastAPI:
    """The app for `config` (default: the file `$TIERBENCH_FASTAPI_CONFIG` names)."""
    config = config or load_config()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import fastapi

        from serving.pytorch.service import ImageService

        state["service"] = ImageService(config["model"], config.get("device", "cpu"), config.get("torch_threads"),
                                        config.get("options"), tuple(config.get("warmup_batch_sizes", ())),
                                        SERVER_NAME, fastapi.__version__)
        ready_dir = os.environ.get(READY_DIR_VARIABLE)
        if ready_dir:
            (Path(ready_dir) / f"ready-{os.getpid()}").write_text(json.dumps(state["service"].runner.info))
        yield

    app = FastAPI(title="tierbench FastAPI + PyTorch", lifespan=lifespan)

    @app.post("/predict")
    async def predict(body: PredictRequest) -> Response:
        try:
            logits, timing = await state["service"].images(json_images.decode_images({"images": body.images}))
        except (OSError, ValueError) as exc:  # not base64, or not an image (PIL: UnidentifiedImageError is OSError)
            return Response(json.dumps({"error": str(exc)}), status_code=400, media_type="application/json")
        return Response(json_images.encode_outputs(logits), media_type=json_images.CONTENT_TYPE,
                        headers={TIMING_HEADER: timing})

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return {**state["service"].runner.info, "pid": os.getpid()}

    @app.api_route("/v2{path:path}", methods=["GET", "POST"])
    async def open_inference_protocol(path: str, request: Request) -> Response:
        service = state["service"]

        async def infer(model: Any, parsed: Any) -> tuple[Any, dict[str, str]]:
            logits, timing = await service.oip_infer(model, parsed)
            return logits, {TIMING_HEADER: timing}

        from serving.oip.protocol import HEADER_LENGTH

        status, body, headers = await service.oip.http(request.method, f"/v2{path}", await request.body(),
                                                       request.headers.get(HEADER_LENGTH), infer)
        return Response(body, status_code=status, headers=headers)

    return app
