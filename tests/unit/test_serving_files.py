"""The model_serving role's host scripts that need only the standard library, run as the role
runs them (a process each), against endpoints on this machine's loopback.

roles/model_serving/files/probe_endpoints.py (the verify step) and ts_register.py (the
TorchServe unit's ExecStartPost) talk HTTP to the served model. The servers here answer as the
role's Flask app (roles/model_serving/files/serve_flask.py: /health, /predict with a bearer
token) and TorchServe's inference and management APIs do (/ping, /predictions/NAME, /models
with its key file's bearer keys; the JSON of TorchServe's documentation). The real stacks run
on the lab (tests/lab/test_model_serving.py). These files are not on pytest's pythonpath (the
others of the role import torch, flask, ts or pytriton), so they are tested as programs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

FILES = Path(__file__).resolve().parents[2] / "roles" / "model_serving" / "files"
# sample.json as scripts/smoke/l6_export.py writes it (tolerances: its ATOL, RTOL).
SAMPLE = {
    "input": [[0.5, -1.0, 0.25, 2.0, 0.0, 1.5, -0.75, 0.125]],
    "output": [[0.5, -0.25]],
    "atol": 1e-4,
    "rtol": 1e-4,
}
TOKEN = "flask-token-3c1e"  # noqa: S105  # a test value
KEYS = {"management": {"key": "mgmt-key-9a"}, "inference": {"key": "inf-key-7b"}, "API": {}}

Route = Callable[[str, dict[str, str], Any], tuple[int, Any]]


class Server:
    """A loopback HTTP server: (method, path) -> route(query, headers, json body)."""

    def __init__(self, routes: dict[tuple[str, str], Route]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                url = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.seen.append((self.command, self.path, headers))
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                route = server.routes.get((self.command, url.path))
                status, answer = route(url.query, headers, body) if route else (404, {"code": 404})
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # http.server's method names

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def servers() -> Iterator[Callable[[dict[tuple[str, str], Route]], Server]]:
    made: list[Server] = []

    def make(routes: dict[tuple[str, str], Route]) -> Server:
        made.append(Server(routes))
        return made[-1]

    yield make
    for s in made:
        s.close()


def bearer(key: str, answer: tuple[int, Any]) -> Route:
    """A route that answers only a request with `Authorization: Bearer key`."""

    def route(query: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        if headers.get("authorization") != f"Bearer {key}":
            return 401, {
                "code": 401,
                "type": "Unauthorized",
                "message": "Token Authorization failed",
            }
        return answer

    return route


def always(status: int, answer: Any) -> Route:
    return lambda query, headers, body: (status, answer)


def run(script: str, *args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, str(FILES / script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(SAMPLE))
    return path


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return port


# ---------------------------------------------------------------------------
# probe_endpoints.py, the Flask stack


def flask_routes(outputs: Any) -> dict[tuple[str, str], Route]:
    return {
        ("GET", "/health"): always(200, {"status": "ok", "model": "tiny", "torch": "2.13.0+cpu"}),
        ("POST", "/predict"): bearer(TOKEN, (200, {"outputs": outputs})),
    }


def test_flask_probe_sends_the_token_from_the_env_file_and_checks_the_output(
    servers: Callable[..., Server], sample: Path, tmp_path: Path
) -> None:
    # Within atol + rtol * |want| of the eager output: 0.5 + 5e-5 and -0.25 - 5e-5.
    server = servers(flask_routes([[0.50005, -0.25005]]))
    env = tmp_path / "flask.env"
    env.write_text(f"MODEL_SERVING_NAME=tiny\nMODEL_SERVING_TOKEN={TOKEN}\n")
    rc, out, err = run(
        "probe_endpoints.py",
        *("--stack", "flask", "--port", str(server.port), "--sample", str(sample)),
        *("--requests", "3", "--token-file", str(env), "--timeout", "10"),
    )
    assert rc == 0, out + err
    doc = json.loads(out)
    assert TOKEN not in out
    assert (doc["ok"], doc["health"], doc["auth"]) == (True, "ready", "bearer token")
    assert doc["endpoint"] == f"http://127.0.0.1:{server.port}"
    assert doc["inference"]["status"] == 200
    assert doc["inference"]["ok"] is True
    assert doc["inference"]["max_abs_diff"] == pytest.approx(5e-5)
    assert doc["latency"]["requests"] == 3
    assert set(doc["latency"]) == {"requests", "median_ms", "min_ms", "max_ms"}
    posts = [(p, h) for m, p, h in server.seen if m == "POST"]
    assert len(posts) == 3
    assert all(h["authorization"] == f"Bearer {TOKEN}" for _, h in posts)


def test_flask_probe_fails_an_output_off_by_more_than_the_tolerance(
    servers: Callable[..., Server], sample: Path, tmp_path: Path
) -> None:
    server = servers(flask_routes([[0.75, -0.25]]))
    env = tmp_path / "flask.env"
    env.write_text(f"MODEL_SERVING_TOKEN={TOKEN}\n")
    rc, out, _ = run(
        "probe_endpoints.py",
        *("--stack", "flask", "--port", str(server.port), "--sample", str(sample)),
        *("--requests", "1", "--token-file", str(env)),
    )
    assert rc == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["inference"] == {"status": 200, "ok": False, "max_abs_diff": 0.25}


def test_flask_probe_without_the_token_reads_the_refusal_as_a_failure(
    servers: Callable[..., Server], sample: Path
) -> None:
    server = servers(flask_routes([[0.5, -0.25]]))
    rc, out, _ = run(
        "probe_endpoints.py",
        *("--stack", "flask", "--port", str(server.port), "--sample", str(sample)),
        *(
            "--requests",
            "1",
        ),
    )
    assert rc == 1
    doc = json.loads(out)
    assert (doc["auth"], doc["inference"]["status"], doc["inference"]["ok"]) == ("none", 401, False)


def test_a_dead_endpoint_is_a_verdict_not_a_traceback(sample: Path) -> None:
    port = free_port()
    rc, out, err = run(
        "probe_endpoints.py",
        *("--stack", "flask", "--port", str(port), "--sample", str(sample), "--timeout", "0"),
    )
    assert rc == 1
    assert err == ""
    assert json.loads(out) == {
        "stack": "flask",
        "endpoint": f"http://127.0.0.1:{port}",
        "ok": False,
        "health": "not ready",
        "error": "TimeoutError: not ready after 0s",
    }


# ---------------------------------------------------------------------------
# probe_endpoints.py, the TorchServe stack


def torchserve(
    servers: Callable[..., Server], models: list[str], outputs: Any
) -> tuple[Server, Server]:
    inf = KEYS["inference"]["key"]
    mgmt = KEYS["management"]["key"]
    inference = servers(
        {
            ("GET", "/ping"): bearer(inf, (200, {"status": "Healthy"})),
            ("POST", "/predictions/tiny"): bearer(inf, (200, {"outputs": outputs})),
        }
    )
    listed = {"models": [{"modelName": m, "modelUrl": f"{m}.mar"} for m in models]}
    management = servers({("GET", "/models"): bearer(mgmt, (200, listed))})
    return inference, management


def probe_torchserve(
    inference: Server, management: Server, sample: Path, keys: Path
) -> tuple[int, dict[str, Any]]:
    rc, out, _ = run(
        "probe_endpoints.py",
        *("--stack", "torchserve", "--port", str(inference.port)),
        *("--management-port", str(management.port), "--model", "tiny"),
        *("--sample", str(sample), "--requests", "2", "--key-file", str(keys)),
    )
    for key in ("mgmt-key-9a", "inf-key-7b"):
        assert key not in out
    doc: dict[str, Any] = json.loads(out)
    return rc, doc


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key_file.json"
    path.write_text(json.dumps(KEYS))
    return path


def test_torchserve_probe_uses_both_keys_and_sees_the_model_registered(
    servers: Callable[..., Server], sample: Path, key_file: Path
) -> None:
    inference, management = torchserve(servers, ["tiny"], [[0.5, -0.25]])
    rc, doc = probe_torchserve(inference, management, sample, key_file)
    assert rc == 0, doc
    assert (doc["ok"], doc["registered"], doc["auth"]) == (True, True, "token")
    assert doc["health_url"] == f"http://127.0.0.1:{inference.port}/ping"
    assert doc["inference"] == {"status": 200, "ok": True, "max_abs_diff": 0.0}
    # The unauthenticated GET /models was refused: that is what "token" means.
    assert [h.get("authorization") for m, p, h in management.seen] == [
        "Bearer mgmt-key-9a",
        None,
    ]


def test_torchserve_probe_fails_when_the_model_is_not_registered(
    servers: Callable[..., Server], sample: Path, key_file: Path
) -> None:
    inference, management = torchserve(servers, ["other"], [[0.5, -0.25]])
    rc, doc = probe_torchserve(inference, management, sample, key_file)
    assert rc == 1
    assert (doc["ok"], doc["registered"], doc["inference"]["ok"]) == (False, False, True)
    # the registration it tried failed: its answer says why (this fake has no POST route)
    assert doc["error"].startswith("register tiny: HTTP 404"), doc
    assert "registered_now" not in doc


def test_torchserve_probe_registers_a_model_torchserve_no_longer_lists(
    servers: Callable[..., Server], sample: Path, key_file: Path
) -> None:
    """The repair verify.yml's own tasks did before (a wait for the key file, its slurp, the
    list and the POST: four module runs on every run), now inside the one probe run."""
    inference, management = torchserve(servers, [], [[0.5, -0.25]])
    registered = {"status": 'Model "tiny" Version: 1.0 registered with 1 initial workers'}
    management.routes[("POST", "/models")] = bearer(KEYS["management"]["key"], (200, registered))
    rc, doc = probe_torchserve(inference, management, sample, key_file)
    assert rc == 0, doc
    assert (doc["ok"], doc["registered"], doc["inference"]["ok"]) == (True, True, True)
    assert doc["registered_now"] == f"register tiny: HTTP 200: {registered}"
    assert [(m, p) for m, p, _ in management.seen][:2] == [
        ("GET", "/models"),
        ("POST", "/models?url=tiny.mar&model_name=tiny&initial_workers=1&synchronous=true"),
    ]


def test_torchserve_probe_waits_for_a_key_file_written_late(
    servers: Callable[..., Server], sample: Path, tmp_path: Path
) -> None:
    """TorchServe writes key_file.json after it starts: the probe waits for it (--timeout)."""
    inference, management = torchserve(servers, ["tiny"], [[0.5, -0.25]])
    late = tmp_path / "late" / "key_file.json"
    late.parent.mkdir()
    timer = threading.Timer(1.5, lambda: late.write_text(json.dumps(KEYS)))
    timer.start()
    try:
        rc, doc = probe_torchserve(inference, management, sample, late)
    finally:
        timer.cancel()
    assert rc == 0, doc
    assert doc["ready_s"] >= 1.0
    assert "registered_now" not in doc


# ---------------------------------------------------------------------------
# ts_register.py


def test_ts_register_leaves_a_registered_model_alone(
    servers: Callable[..., Server], key_file: Path
) -> None:
    inference, management = torchserve(servers, ["tiny"], [])
    rc, out, _ = run(
        "ts_register.py",
        *("--port", str(management.port), "--inference-port", str(inference.port)),
        *("--model", "tiny", "--key-file", str(key_file), "--timeout", "10"),
    )
    assert (rc, out) == (0, "tiny is registered\n")
    assert [(m, p) for m, p, _ in management.seen] == [("GET", "/models")]


def test_ts_register_registers_a_missing_model_from_the_store(
    servers: Callable[..., Server], key_file: Path
) -> None:
    inference, management = torchserve(servers, [], [])
    registered = {"status": 'Model "tiny" Version: 1.0 registered with 1 initial workers'}
    management.routes[("POST", "/models")] = bearer(KEYS["management"]["key"], (200, registered))
    rc, out, _ = run(
        "ts_register.py",
        *("--port", str(management.port), "--inference-port", str(inference.port)),
        *("--model", "tiny", "--key-file", str(key_file), "--timeout", "10"),
    )
    assert rc == 0
    assert out == f"register tiny: HTTP 200: {registered}\n"
    assert [(m, p) for m, p, _ in management.seen] == [
        ("GET", "/models"),
        ("POST", "/models?url=tiny.mar&model_name=tiny&initial_workers=1&synchronous=true"),
    ]


def test_ts_register_gives_up_when_torchserve_never_answers() -> None:
    rc, out, err = run(
        "ts_register.py",
        *("--port", str(free_port()), "--inference-port", str(free_port())),
        *("--model", "tiny", "--timeout", "0"),
    )
    assert (rc, out, err) == (1, "", "TorchServe not ready after 0s\n")


def test_close_compares_shapes_and_values_on_the_hosts_python() -> None:
    """probe_endpoints.close: a row or a value too many or too few is not close (it used
    zip(strict=...), which the hosts' Python 3.9 lacks)."""
    code = (
        "import json, probe_endpoints as p\n"
        "cases = [([[1.0, 2.0]], [[1.0, 2.0]]), ([[1.0, 2.0]], [[1.0]]), ([[1.0], [2.0]], [[1.0]]),"
        " ([[1.0, 2.5]], [[1.0, 2.0]]), (None, [[1.0]]), ([['x']], [[1.0]])]\n"
        "print(json.dumps([p.close(g, w, 1e-4, 0.0) for g, w in cases]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(FILES), "PATH": "/usr/bin:/bin"},
    )
    got = json.loads(proc.stdout)
    assert [ok for ok, _ in got] == [True, False, False, False, False, False]
    assert got[0][1] == 0.0
    assert got[3][1] == 0.5
