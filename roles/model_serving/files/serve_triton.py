"""Triton on the CPU through nvidia-pytriton (the lab's Triton; real fleets run the NGC image).

PyTriton starts the tritonserver binary its wheel bundles. That build has only the Python
backend, so the ONNX model of the model repository runs in onnxruntime inside the function
PyTriton binds, under the same model name and KServe v2 protocol (/v2/health/ready,
/v2/models/NAME/infer) that the NGC container serves.

    serve_triton.py MODEL.onnx NAME ADDRESS HTTP_PORT GRPC_PORT METRICS_PORT
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def main(argv: list[str]) -> int:
    onnx_path, name, address, http, grpc, metrics = argv
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])

    @batch  # type: ignore[untyped-decorator]  # pytriton ships no type hints
    def infer(x: Any) -> dict[str, Any]:
        return {"y": sess.run(None, {"x": x.astype(np.float32)})[0]}

    config = TritonConfig(
        http_address=address,
        http_port=int(http),
        grpc_address=address,
        grpc_port=int(grpc),
        metrics_port=int(metrics),
        allow_metrics=True,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=name,
            infer_func=infer,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(8,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(2,))],
            config=ModelConfig(max_batch_size=64),
        )
        triton.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
