#!/usr/bin/env python3
"""Host-side helper of the jupyterlab role (stdlib + websocket-client, which jupyter_server needs).

gpuprov_jupyter.py probe
    run with the kernel's interpreter: prints {"torch", "cuda", "display_name"} as JSON,
    read from torch/version.py without importing torch
gpuprov_jupyter.py roundtrip --url URL --kernel NAME [--cafile PEM]   (token on stdin)
    REST health (/api/status with the token), then a real kernel round trip: start a
    kernel through the server, run `import torch; print(torch.__version__,
    torch.cuda.is_available())` over the kernel's websocket, delete the kernel. Prints
    one JSON document; exit 0 when every step worked, 1 otherwise (the document names the
    failed step). The token is read from stdin and never printed.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

CODE = "import torch; print(torch.__version__, torch.cuda.is_available(), torch.version.cuda)"


def kernel_display_name(torch_version: str, cuda: str | None) -> str:
    """Kernel display name: PyTorch 2.13.0 (CPU), PyTorch 1.3.0 CUDA 10.1."""
    base = torch_version.split("+", 1)[0]
    return f"PyTorch {base} CUDA {cuda}" if cuda else f"PyTorch {base} (CPU)"


def parse_answer(text: str) -> dict[str, Any]:
    """`print(torch.__version__, torch.cuda.is_available(), torch.version.cuda)` ->
    {"torch", "cuda_available", "cuda"} (cuda None for a CPU build)."""
    parts = text.split()
    if len(parts) != 3 or parts[1] not in ("True", "False"):
        raise ValueError(f"unexpected kernel output {text!r}")
    return {
        "torch": parts[0],
        "cuda_available": parts[1] == "True",
        "cuda": None if parts[2] == "None" else parts[2],
    }


def probe() -> dict[str, Any]:
    """The environment's torch build, read from torch/version.py, the module that
    torch.__version__ and torch.version.cuda come from, without importing torch (about a
    second on a CPU build; the verify phase's kernel round trip imports it)."""
    import importlib.util
    import runpy
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"no torch package for {sys.executable}")
    version = runpy.run_path(str(Path(next(iter(spec.submodule_search_locations)), "version.py")))
    torch_version, cuda = str(version["__version__"]), version.get("cuda")
    return {
        "torch": torch_version,
        "cuda": cuda,
        "display_name": kernel_display_name(torch_version, cuda),
    }


def _request(
    url: str, token: str, method: str = "GET", body: Any = None, ctx: ssl.SSLContext | None = None
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http(s) only)
    req.add_header("Authorization", f"token {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:  # noqa: S310
        raw = resp.read()
    return json.loads(raw) if raw else None


def execute(ws: Any, code: str, timeout: float) -> str:
    """Send one execute_request on the kernel's websocket; return the stream output."""
    msg_id = uuid.uuid4().hex
    ws.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": "gpuprov",
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                    "stop_on_error": True,
                },
                "channel": "shell",
            }
        )
    )
    out: list[str] = []
    replied = idle = False
    deadline = time.monotonic() + timeout
    while not (replied and idle):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer from the kernel within {timeout:.0f}s")
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg.get("msg_type") or msg["header"]["msg_type"]
        content = msg.get("content", {})
        if kind == "stream" and content.get("name") == "stdout":
            out.append(content.get("text", ""))
        elif kind == "error":
            raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
        elif kind == "execute_reply":
            replied = True
            if content.get("status") != "ok":
                raise RuntimeError(f"execute_reply status {content.get('status')}")
        elif kind == "status" and content.get("execution_state") == "idle":
            idle = True
    return "".join(out).strip()


def roundtrip(
    url: str, kernel: str, token: str, cafile: str | None, timeout: float, result: dict[str, Any]
) -> dict[str, Any]:
    """Fill `result` step by step (a failure leaves the step that failed in it)."""
    import websocket

    base = url.rstrip("/")
    ctx = ssl.create_default_context(cafile=cafile) if base.startswith("https") else None
    result.update({"url": base, "kernel": kernel, "step": "health", "ok": False})
    status = _request(f"{base}/api/status", token, ctx=ctx)
    result["server"] = {"started": status.get("started"), "kernels": status.get("kernels")}
    result["step"] = "kernelspec"
    specs = _request(f"{base}/api/kernelspecs", token, ctx=ctx)
    if kernel not in specs.get("kernelspecs", {}):
        raise LookupError(f"kernel {kernel!r} not offered: {sorted(specs.get('kernelspecs', {}))}")
    result["display_name"] = specs["kernelspecs"][kernel]["spec"]["display_name"]
    result["step"] = "start kernel"
    started = _request(f"{base}/api/kernels", token, "POST", {"name": kernel}, ctx=ctx)
    kid = started["id"]
    try:
        result["step"] = "execute"
        ws_url = "ws" + base[4:] + f"/api/kernels/{kid}/channels"
        sslopt = {"ca_certs": cafile} if cafile else {}
        ws = websocket.create_connection(
            ws_url, header=[f"Authorization: token {token}"], timeout=timeout, sslopt=sslopt
        )
        try:
            answer = execute(ws, CODE, timeout)
        finally:
            ws.close()
        result["output"] = answer
        result.update(parse_answer(answer))
    finally:
        _request(f"{base}/api/kernels/{kid}", token, "DELETE", ctx=ctx)
    result["step"] = "done"
    result["ok"] = True
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    rt = sub.add_parser("roundtrip")
    rt.add_argument("--url", required=True)
    rt.add_argument("--kernel", required=True)
    rt.add_argument("--cafile")
    rt.add_argument("--timeout", type=float, default=90)
    args = parser.parse_args(argv)
    if args.cmd == "probe":
        print(json.dumps(probe()))
        return 0
    token = sys.stdin.readline().strip()
    result: dict[str, Any] = {}
    try:
        roundtrip(args.url, args.kernel, token, args.cafile, args.timeout, result)
    except Exception as exc:  # any failure becomes one line in the document, never a traceback
        detail: object = exc
        if isinstance(exc, urllib.error.HTTPError):
            detail = f"HTTP {exc.code} {exc.reason}"
        elif isinstance(exc, urllib.error.URLError):
            detail = exc.reason
        result.update({"ok": False, "error": f"{type(exc).__name__}: {detail}"})
    print(json.dumps(result))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
