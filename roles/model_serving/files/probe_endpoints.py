#!/usr/bin/env python3
"""Health, a real inference and the round-trip latency of one serving endpoint.

    probe_endpoints.py --stack flask|torchserve|triton --host 127.0.0.1 --port P
        --sample sample.json [--management-port P] [--model NAME] [--requests N]
        [--token-file ENVFILE] [--key-file key_file.json] [--timeout S]

Reads secrets from files only (the Flask unit's EnvironmentFile, TorchServe's key_file.json),
never from argv. Compares the served output with the eager output of sample.json within its
atol/rtol. Waits up to --timeout for readiness. Prints one JSON object; exit 0 when health
and inference are right, 1 otherwise. Latency (median of N round trips) is reported, never
judged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def http(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))  # noqa: S310
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310  # http://127.0.0.1 by default
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw or b"null")
    except json.JSONDecodeError:
        return status, raw.decode(errors="replace")


def close(got: Any, want: list[list[float]], atol: float, rtol: float) -> tuple[bool, float]:
    # No zip(strict=...): this runs on the host's Python, 3.9 on EL9.
    try:
        if len(got) != len(want) or any(len(gr) != len(wr) for gr, wr in zip(got, want)):
            return False, float("inf")
        pairs = [(float(g), float(w)) for gr, wr in zip(got, want) for g, w in zip(gr, wr)]
    except (TypeError, ValueError):
        return False, float("inf")
    worst = max(abs(g - w) for g, w in pairs)
    return all(abs(g - w) <= atol + rtol * abs(w) for g, w in pairs), worst


def env_token(path: str) -> str:
    if not path:
        return ""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MODEL_SERVING_TOKEN":
            return value.strip()
    return ""


def wait_until(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until check() is true; raises TimeoutError."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except (OSError, urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not ready after {timeout:.0f}s")
        time.sleep(1)


def timed(n: int, call: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    out, times = None, []
    for _ in range(n):
        t0 = time.perf_counter()
        out = call()
        times.append((time.perf_counter() - t0) * 1000)
    return out, {
        "requests": n,
        "median_ms": round(statistics.median(times), 3),
        "min_ms": round(min(times), 3),
        "max_ms": round(max(times), 3),
    }


def probe(a: argparse.Namespace) -> dict[str, Any]:
    sample = json.loads(Path(a.sample).read_text(encoding="utf-8"))
    x, want = sample["input"], sample["output"]
    base = f"http://{a.host}:{a.port}"
    out: dict[str, Any] = {"stack": a.stack, "endpoint": base, "model": a.model}
    if a.stack == "flask":
        token = env_token(a.token_file)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        out["health_url"] = f"{base}/health"
        out["ready_s"] = round(
            wait_until(lambda: http("GET", f"{base}/health")[0] == 200, a.timeout), 2
        )
        (status, body), lat = timed(
            a.requests, lambda: http("POST", f"{base}/predict", {"inputs": x}, headers)
        )
        got = body.get("outputs") if isinstance(body, dict) else None
        out["auth"] = "bearer token" if token else "none"
    elif a.stack == "torchserve":
        # ts_register.py lies beside this script (the role copies both): the wait for the key
        # file and /ping, and the registration of a model TorchServe no longer lists (a
        # repair, reported as registered_now), are the ones the unit's ExecStartPost runs.
        import ts_register

        out["health_url"] = f"{base}/ping"
        start = time.monotonic()
        keys = ts_register.wait_ready(a.host, a.port, a.key_file, a.timeout)
        out["ready_s"] = round(time.monotonic() - start, 2)
        inf = {"Authorization": f"Bearer {keys['inference']['key']}"} if keys else {}
        mkey = keys["management"]["key"] if keys else ""
        mbase = f"http://{a.host}:{a.management_port}"
        registered, now, said = ts_register.ensure_registered(
            a.host, a.management_port, a.model, mkey, a.timeout
        )
        out["registered"] = registered
        if now:
            out["registered_now"] = said
        elif not registered:
            out["error"] = said  # the management API's answer: why the model is not served
        noauth = http("GET", f"{mbase}/models")[0]
        out["auth"] = (
            "token"
            if keys and noauth in (400, 401, 403)
            else f"none (unauthenticated GET /models: {noauth})"
        )
        url = f"{base}/predictions/{a.model}"
        (status, body), lat = timed(a.requests, lambda: http("POST", url, {"inputs": x}, inf))
        got = body.get("outputs") if isinstance(body, dict) else None
    else:
        import numpy as np
        import tritonclient.http as tc

        out["health_url"] = f"{base}/v2/health/ready"
        out["ready_s"] = round(
            wait_until(lambda: http("GET", f"{base}/v2/health/ready")[0] == 200, a.timeout), 2
        )
        client = tc.InferenceServerClient(url=f"{a.host}:{a.port}")
        out["model_ready"] = bool(client.is_model_ready(a.model))
        arr = np.asarray(x, dtype=np.float32)

        def infer() -> Any:
            inp = tc.InferInput("x", list(arr.shape), "FP32")
            inp.set_data_from_numpy(arr)
            return client.infer(a.model, [inp], outputs=[tc.InferRequestedOutput("y")]).as_numpy(
                "y"
            )

        result, lat = timed(a.requests, infer)
        status, got = 200, result.tolist()
        out["client"] = f"tritonclient {getattr(tc, '__version__', '')}".strip()
    ok, worst = close(got, want, float(sample["atol"]), float(sample["rtol"]))
    out["health"] = "ready"
    out["inference"] = {"status": status, "ok": ok, "max_abs_diff": worst}
    out["latency"] = lat
    out["ok"] = ok and out.get("registered", True) is not False
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", choices=("flask", "torchserve", "triton"), required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--management-port", type=int, default=0)
    p.add_argument("--model", default="tiny")
    p.add_argument("--sample", required=True)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--token-file", default="")
    p.add_argument("--key-file", default="")
    p.add_argument("--timeout", type=float, default=180)
    a = p.parse_args(argv)
    try:
        out = probe(a)
    except Exception as exc:  # a dead endpoint is this probe's verdict, not a crash
        out = {
            "stack": a.stack,
            "endpoint": f"http://{a.host}:{a.port}",
            "ok": False,
            "health": "not ready",
            "error": f"{type(exc).__name__}: {exc}"[:400],
        }
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
