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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--inference-port", type=int, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--key-file", default="")
    p.add_argument("--timeout", type=float, default=180)
    a = p.parse_args(argv)
    deadline = time.monotonic() + a.timeout
    keys: dict[str, Any] = {}
    while True:
        try:
            if a.key_file:
                keys = json.loads(Path(a.key_file).read_text(encoding="utf-8"))
            inf = keys.get("inference", {}).get("key", "")
            if call("GET", f"http://{a.host}:{a.inference_port}/ping", inf)[0] == 200:
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            print(f"TorchServe not ready after {a.timeout:.0f}s", file=sys.stderr)
            return 1
        time.sleep(1)
    mkey = keys.get("management", {}).get("key", "")
    base = f"http://{a.host}:{a.port}"
    code, listed = call("GET", f"{base}/models", mkey)
    names = (
        [m.get("modelName") for m in listed.get("models", [])] if isinstance(listed, dict) else []
    )
    if code == 200 and a.model in names:
        print(f"{a.model} is registered")
        return 0
    url = f"{base}/models?url={a.model}.mar&model_name={a.model}&initial_workers=1&synchronous=true"
    code, body = call("POST", url, mkey, timeout=a.timeout)
    print(f"register {a.model}: HTTP {code}: {body}")
    return 0 if code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
