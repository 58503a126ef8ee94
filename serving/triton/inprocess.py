"""ONNX Runtime timed in-process (`serving.inprocess`): the runtime Triton serves the model's ONNX export with, given
the provider chain and the file (FP16, INT8) a Triton variant is given, with no server around it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.inprocess import ROUND_TRIP, RuntimeCaller
from serving.paths import cache_root

if TYPE_CHECKING:
    import numpy as np

    from serving.model_config import ModelConfig
    from serving.runtime import Runtime


class OnnxCaller(RuntimeCaller):
    def __init__(self, model_cfg: ModelConfig, runtime: Runtime, engine_cache_dir: str | None) -> None:
        self.model_cfg, self.runtime, self.engine_cache_dir = model_cfg, runtime, engine_cache_dir

    def setup(self) -> None:
        import onnxruntime as ort

        from serving.export import ensure_onnx
        from serving.paths import node_model_repository
        from serving.triton.ort_probe import preload_gpu_libraries
        from serving.triton.settings import Accelerator

        provider = self.runtime.provider or Accelerator.CPU.provider
        accelerator = next(a for a in Accelerator if a.provider == provider)
        chain = accelerator.providers  # the provider and those it falls back on, as the Triton model is given them
        if accelerator.gpu:
            preload_gpu_libraries()
        options = ort.SessionOptions()
        if self.runtime.threads:
            options.intra_op_num_threads = self.runtime.threads
        path = ensure_onnx(self.model_cfg, node_model_repository()).onnx_path
        if self.runtime.precision in ("int8", "fp16"):  # the file a Triton variant serves (INT8: the built-in corpus)
            import onnx

            from serving.models import preprocessing
            from serving.triton.quantize import served_onnx
            from serving.workloads.image.corpus import InputSource

            graph = onnx.load(path, load_external_data=False).graph  # its input's name, without a session
            weights = {w.name for w in graph.initializer}
            input_name = next(i.name for i in graph.input if i.name not in weights)
            path = str(served_onnx(Path(path), self.runtime.precision, accelerator is Accelerator.TENSORRT,
                                   input_name, preprocessing(self.model_cfg), InputSource()))
        providers = [(name, self._provider_options(name)) for name in chain]
        self.session = ort.InferenceSession(path, options, providers=providers)
        got = self.session.get_providers()
        if got[0] != provider:
            raise RuntimeError(f"ONNX Runtime {ort.__version__} could not use {provider} here (the session got {got})")
        self.ort = ort
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name

    def _provider_options(self, name: str) -> dict[str, Any]:
        if name == "TensorrtExecutionProvider":
            cache = self.engine_cache_dir or str(cache_root() / "trt-ceiling")
            os.makedirs(cache, exist_ok=True)
            return {"trt_fp16_enable": self.runtime.precision == "fp16",
                    "trt_int8_enable": self.runtime.precision == "int8", "trt_engine_cache_enable": True,
                    "trt_engine_cache_path": cache, "trt_timing_cache_enable": True, "trt_timing_cache_path": cache}
        return {}

    def call(self, batch: np.ndarray, mode: str) -> Callable[[], Any]:
        session, feeds = self.session, {self.input_name: batch}
        if mode == ROUND_TRIP:
            return lambda: session.run([self.output_name], feeds)
        binding = session.io_binding()
        binding.bind_ortvalue_input(self.input_name, self.ort.OrtValue.ortvalue_from_numpy(batch, "cuda", 0))
        binding.bind_output(self.output_name, "cuda", 0)

        def run_resident() -> None:
            session.run_with_iobinding(binding)  # synchronises the provider's stream before it returns

        return run_resident

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": self.ort.__version__, "providers": ",".join(self.session.get_providers())}
