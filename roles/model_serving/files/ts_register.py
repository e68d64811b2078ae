#!/usr/bin/env python3
"""Register the model with TorchServe through its management API (the unit's ExecStartPost).

    ts_register.py --port MGMT_PORT --inference-port INF_PORT --model NAME [--key-file F]
                   [--host 127.0.0.1] [--timeout S]

Waits for TorchServe (its key file and /ping), then registers NAME.mar from the model store
when GET /models does not list it: every start of the service (boot, crash, restart) serves
the model again, without config snapshots. Keys are read from the file, never from argv.
Exit 0 when the model is registered, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def call(method: str, url: str, key: str, timeout: float = 10) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method)  # noqa: S310  # http://127.0.0.1 by default
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def wait_ready(host: str, inference_port: int, key_file: str, timeout: float) -> dict[str, Any]:
    """TorchServe's API keys (from ``key_file``; {} without one) once /ping answers 200 with
    them. TimeoutError after ``timeout`` seconds (the key file may be written late)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            keys: dict[str, Any] = (
                json.loads(Path(key_file).read_text(encoding="utf-8")) if key_file else {}
            )
            inf = keys.get("inference", {}).get("key", "")
            if call("GET", f"http://{host}:{inference_port}/ping", inf)[0] == 200:
                return keys
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"TorchServe not ready after {timeout:.0f}s")
        time.sleep(1)


def ensure_registered(
    host: str, port: int, model: str, key: str, timeout: float
) -> tuple[bool, bool, str]:
    """Register ``model`` from the model store when GET /models does not list it. Returns
    (registered: listed or registered now, registered_now, what was done)."""
    base = f"http://{host}:{port}"
    code, listed = call("GET", f"{base}/models", key)
    names = (
        [m.get("modelName") for m in listed.get("models", [])] if isinstance(listed, dict) else []
    )
    if code == 200 and model in names:
        return True, False, f"{model} is registered"
    url = f"{base}/models?url={model}.mar&model_name={model}&initial_workers=1&synchronous=true"
    code, body = call("POST", url, key, timeout=timeout)
    return code == 200, code == 200, f"register {model}: HTTP {code}: {body}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--inference-port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--key-file", default="")
    p.add_argument("--timeout", type=float, default=180)
    a = p.parse_args(argv)
    try:
        keys = wait_ready(a.host, a.inference_port, a.key_file, a.timeout)
    except TimeoutError as exc:
        print(exc, file=sys.stderr)
        return 1
    mkey = keys.get("management", {}).get("key", "")
    registered, _, said = ensure_registered(a.host, a.port, a.model, mkey, a.timeout)
    print(said)
    return 0 if registered else 1


if __name__ == "__main__":
    sys.exit(main())
