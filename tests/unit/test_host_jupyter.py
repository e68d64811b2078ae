"""roles/jupyterlab/files/gpuprov_jupyter.py roundtrip, run as the role runs it (a process,
the token on stdin), against a Jupyter server's REST API on this machine's loopback.

The server here answers /api/status, /api/kernelspecs, POST /api/kernels and DELETE
/api/kernels/ID as jupyter_server does, and only with `Authorization: token TOKEN`. The
kernel's websocket is the one thing simulated: websocket-client is not in the dev venv, so a
stand-in `websocket` module (create_connection -> send/recv/close, its API) is put first on
the process's PYTHONPATH; it hands each message to this test's kernel, which answers with
the Jupyter messaging protocol's iopub/shell messages. The real JupyterLab, kernel and
websocket run on the lab (tests/lab/test_jupyterlab_storage.py::test_kernel_round_trip).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SCRIPT = (
    Path(__file__).resolve().parents[2] / "roles" / "jupyterlab" / "files" / "gpuprov_jupyter.py"
)
TOKEN = "jl-token-5d2a"  # noqa: S105  # a test value
KERNEL = "gpuprov-torch"
KID = "3f0c6a2e-9b1d-4c53-8e7a-51d0c2b4a911"

# The stand-in for websocket-client: it posts each sent message to the test server's
# /_channel endpoint (with the URL and headers it was opened with) and returns the kernel's
# answers from recv(), one at a time.
WEBSOCKET_STANDIN = """
import json
import urllib.request


class _Socket:
    def __init__(self, url, header):
        self.url, self.header, self.queue = url, header, []
        self.http = "http" + url[2:].split("/api/", 1)[0]

    def _post(self, doc):
        req = urllib.request.Request(self.http + "/_channel", data=json.dumps(doc).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def send(self, text):
        self.queue += self._post({"url": self.url, "header": self.header, "message": text})

    def recv(self):
        return json.dumps(self.queue.pop(0))

    def close(self):
        self._post({"url": self.url, "closed": True})


def create_connection(url, header=None, timeout=None, sslopt=None):
    return _Socket(url, header)
"""


class Jupyter:
    """A loopback jupyter_server: the REST calls the helper makes, and a kernel whose answer
    to an execute_request is ``output`` on stdout (or ``error``, an exception it raised)."""

    def __init__(self) -> None:
        self.kernelspecs = {
            "python3": {"name": "python3", "spec": {"display_name": "Python 3 (ipykernel)"}},
            KERNEL: {"name": KERNEL, "spec": {"display_name": "PyTorch 2.13.0 (CPU)"}},
        }
        self.output = "2.13.0+cpu False None\n"
        self.error: tuple[str, str] | None = None
        self.seen: list[tuple[str, str]] = []
        self.channel: list[dict[str, Any]] = []
        jupyter = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                jupyter.seen.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body: Any = json.loads(self.rfile.read(length)) if length else None
                answer: Any
                if self.path == "/_channel":
                    status, answer = 200, jupyter.kernel(body)
                elif self.headers.get("Authorization") != f"token {TOKEN}":
                    status, answer = 403, {"message": "Forbidden", "reason": None}
                else:
                    status, answer = jupyter.rest(self.command, self.path, body)
                data = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer  # http.server's method names

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def rest(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) == ("GET", "/api/status"):
            return 200, {"started": "2025-01-01T00:00:00Z", "kernels": 0, "connections": 0}
        if (method, path) == ("GET", "/api/kernelspecs"):
            return 200, {"default": "python3", "kernelspecs": self.kernelspecs}
        if (method, path) == ("POST", "/api/kernels") and body["name"] in self.kernelspecs:
            return 201, {"id": KID, "name": body["name"], "execution_state": "starting"}
        if (method, path) == ("DELETE", f"/api/kernels/{KID}"):
            return 204, None
        return 404, {"message": "Not Found"}

    def kernel(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The kernel's messages for one execute_request, as jupyter_server relays them."""
        self.channel.append(doc)
        if doc.get("closed"):
            return []
        request = json.loads(doc["message"])
        parent = {"msg_id": request["header"]["msg_id"]}

        def msg(kind: str, content: dict[str, Any], of: dict[str, str] = parent) -> dict[str, Any]:
            return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": of,
                    "content": content}  # fmt: skip

        out = [msg("status", {"execution_state": "idle"}, {"msg_id": "another-client"})]
        out.append(msg("status", {"execution_state": "busy"}))
        if self.error:
            out.append(msg("error", {"ename": self.error[0], "evalue": self.error[1]}))
            out.append(msg("execute_reply", {"status": "error"}))
        else:
            out.append(msg("stream", {"name": "stdout", "text": self.output}))
            out.append(msg("execute_reply", {"status": "ok"}))
        out.append(msg("status", {"execution_state": "idle"}))
        return out

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def jupyter() -> Iterator[Jupyter]:
    server = Jupyter()
    yield server
    server.close()


def roundtrip(tmp_path: Path, url: str, token: str = TOKEN) -> tuple[int, dict[str, Any], str]:
    standin = tmp_path / "standin"
    standin.mkdir(exist_ok=True)
    (standin / "websocket.py").write_text(WEBSOCKET_STANDIN)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "roundtrip", "--url", url, "--kernel", KERNEL],
        input=token + "\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(standin)},
    )
    assert token not in proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_a_round_trip_reports_the_kernels_torch_and_deletes_the_kernel(
    jupyter: Jupyter, tmp_path: Path
) -> None:
    rc, doc, err = roundtrip(tmp_path, jupyter.url + "/")
    assert (rc, err) == (0, "")
    assert doc == {
        "url": jupyter.url,
        "kernel": KERNEL,
        "step": "done",
        "ok": True,
        "server": {"started": "2025-01-01T00:00:00Z", "kernels": 0},
        "display_name": "PyTorch 2.13.0 (CPU)",
        "output": "2.13.0+cpu False None",
        "torch": "2.13.0+cpu",
        "cuda_available": False,
        "cuda": None,
    }
    assert jupyter.seen[-1] == ("DELETE", f"/api/kernels/{KID}")
    opened = jupyter.channel[0]
    assert (
        opened["url"]
        == f"ws://127.0.0.1:{jupyter.url.rsplit(':', 1)[1]}/api/kernels/{KID}/channels"
    )
    assert opened["header"] == [f"Authorization: token {TOKEN}"]
    request = json.loads(opened["message"])
    assert request["header"]["msg_type"] == "execute_request"
    assert request["content"]["code"].startswith("import torch; print(torch.__version__")
    assert jupyter.channel[-1]["closed"] is True


def test_a_gpu_kernel_reports_its_cuda(jupyter: Jupyter, tmp_path: Path) -> None:
    jupyter.output = "1.3.0 True 10.1\n"
    rc, doc, _ = roundtrip(tmp_path, jupyter.url)
    assert rc == 0
    assert (doc["torch"], doc["cuda_available"], doc["cuda"]) == ("1.3.0", True, "10.1")


def test_a_kernel_the_server_does_not_offer_fails_at_the_kernelspec_step(
    jupyter: Jupyter, tmp_path: Path
) -> None:
    del jupyter.kernelspecs[KERNEL]
    rc, doc, err = roundtrip(tmp_path, jupyter.url)
    assert (rc, err) == (1, "")
    assert (doc["ok"], doc["step"]) == (False, "kernelspec")
    assert doc["error"] == f"LookupError: kernel '{KERNEL}' not offered: ['python3']"
    assert ("POST", "/api/kernels") not in jupyter.seen


def test_a_wrong_token_fails_at_the_health_step_with_the_http_status(
    jupyter: Jupyter, tmp_path: Path
) -> None:
    rc, doc, _ = roundtrip(tmp_path, jupyter.url, token="not-the-token")  # noqa: S106
    assert rc == 1
    assert (doc["ok"], doc["step"], doc["error"]) == (
        False,
        "health",
        "HTTPError: HTTP 403 Forbidden",
    )
    assert jupyter.seen == [("GET", "/api/status")]


def test_a_kernel_without_torch_fails_at_execute_and_is_still_deleted(
    jupyter: Jupyter, tmp_path: Path
) -> None:
    jupyter.error = ("ModuleNotFoundError", "No module named 'torch'")
    rc, doc, _ = roundtrip(tmp_path, jupyter.url)
    assert rc == 1
    assert (doc["ok"], doc["step"]) == (False, "execute")
    assert doc["error"] == "RuntimeError: ModuleNotFoundError: No module named 'torch'"
    assert jupyter.seen[-1] == ("DELETE", f"/api/kernels/{KID}")


def test_unexpected_kernel_output_is_a_failure_naming_it(jupyter: Jupyter, tmp_path: Path) -> None:
    jupyter.output = "2.13.0+cpu\n"
    rc, doc, _ = roundtrip(tmp_path, jupyter.url)
    assert rc == 1
    assert doc["error"] == "ValueError: unexpected kernel output '2.13.0+cpu'"


def test_a_server_that_is_not_listening_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens on the port now
    rc, doc, err = roundtrip(tmp_path, f"http://127.0.0.1:{port}")
    assert (rc, err) == (1, "")
    assert (doc["ok"], doc["step"]) == (False, "health")
    assert doc["error"] == "URLError: [Errno 111] Connection refused"
