"""The plain FastAPI + PyTorch service (`fastapi`): what most teams run first, and the 5-way study's baseline. One
uvicorn process (or several workers), no Ray Serve: the JSON API of base64 JPEGs the study sent (`POST /predict`)
and the Open Inference Protocol over HTTP (tensors and JPEG files), so every format is measured on it."""
