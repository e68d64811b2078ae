"""Flask app of the model_serving role: the exported TorchScript model behind gunicorn.

GET /health -> {"status": "ok", "model": NAME, "torch": VERSION}
POST /predict {"inputs": [[8 floats], ...]} -> {"outputs": [[2 floats], ...]}
Environment: MODEL_SERVING_MODEL (TorchScript file), MODEL_SERVING_NAME, and
MODEL_SERVING_TOKEN (optional bearer token for /predict; from the unit's EnvironmentFile).
"""

from __future__ import annotations

import hmac
import os
from typing import Any

import torch
from flask import Flask, jsonify, request

MODEL_PATH = os.environ.get("MODEL_SERVING_MODEL", "/opt/gpuprov/serving/model/model.traced.pt")
NAME = os.environ.get("MODEL_SERVING_NAME", "tiny")
TOKEN = os.environ.get("MODEL_SERVING_TOKEN", "")

app = Flask(__name__)
model = torch.jit.load(MODEL_PATH, map_location="cpu").eval()


@app.get("/health")  # type: ignore[untyped-decorator]  # Flask is not in the dev venv
def health() -> Any:
    return jsonify(status="ok", model=NAME, torch=torch.__version__)


@app.post("/predict")  # type: ignore[untyped-decorator]
def predict() -> Any:
    if TOKEN:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(sent, TOKEN):
            return jsonify(error="missing or wrong bearer token"), 401
    body = request.get_json(silent=True) or {}
    try:
        x = torch.tensor(body["inputs"], dtype=torch.float32)
    except (KeyError, TypeError, ValueError) as exc:
        return jsonify(error=f"want {{'inputs': [[8 floats], ...]}}: {exc}"), 400
    with torch.no_grad():
        y = model(x)
    return jsonify(outputs=y.tolist())
