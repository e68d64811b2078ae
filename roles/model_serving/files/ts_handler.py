"""TorchServe handler of the model_serving role: JSON {"inputs": [[8 floats], ...]} in,
{"outputs": [[2 floats], ...]} out, through the TorchScript model of the .mar."""

from __future__ import annotations

import json
from typing import Any

import torch
from ts.torch_handler.base_handler import BaseHandler


class TinyHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type hints
    def preprocess(self, data: list[dict[str, Any]]) -> Any:
        rows = []
        for item in data:
            body: Any = item.get("body") or item.get("data")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(body["inputs"])
        self._sizes = [len(r) for r in rows]
        return torch.tensor([x for r in rows for x in r], dtype=torch.float32)

    def postprocess(self, data: Any) -> list[dict[str, Any]]:
        out, start = [], 0
        for n in self._sizes:
            out.append({"outputs": data[start : start + n].tolist()})
            start += n
        return out
