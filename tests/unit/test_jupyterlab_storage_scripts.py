"""Pure parts of the host-side helpers of the jupyterlab and object_storage roles, and the
example inventory's secrets (references to Vault or the controller's environment only)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gpuprov_jupyter as jupyter  # roles/jupyterlab/files/ (pythonpath)
import pytest
import s3_probe as probe  # roles/object_storage/files/ (pythonpath)
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("version", "cuda", "name"),
    [
        ("2.13.0+cpu", None, "PyTorch 2.13.0 (CPU)"),
        ("1.3.0", "10.1", "PyTorch 1.3.0 CUDA 10.1"),
        ("2.5.1+cu124", "12.4", "PyTorch 2.5.1 CUDA 12.4"),
    ],
    ids=["cpu", "cu101", "cu124"],
)
def test_kernel_display_name(version: str, cuda: str | None, name: str) -> None:
    assert jupyter.kernel_display_name(version, cuda) == name


@pytest.mark.parametrize(
    ("cuda_line", "want"),
    [
        ("cuda: Optional[str] = None", (None, "PyTorch 2.13.0 (CPU)")),
        ("cuda: Optional[str] = '12.4'", ("12.4", "PyTorch 2.5.1 CUDA 12.4")),
    ],
)
def test_probe_reads_torch_version_py_without_importing_torch(
    tmp_path: Path, cuda_line: str, want: tuple[str | None, str]
) -> None:
    """As the role runs it (a process of the environment's interpreter, here with a torch
    package laid out as the wheels lay it out on its path), whose __init__ would fail."""
    version = "2.13.0+cpu" if want[0] is None else "2.5.1"
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text("raise ImportError('imported')\n")
    (torch / "version.py").write_text(
        "from typing import Optional\n\n"
        f"__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
        f"__version__ = '{version}'\ndebug = False\n{cuda_line}\n"
        "git_version = '0123abc'\nhip: Optional[str] = None\n"
    )
    proc = subprocess.run(
        [sys.executable, jupyter.__file__, "probe"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"torch": version, "cuda": want[0], "display_name": want[1]}


def test_parse_answer() -> None:
    assert jupyter.parse_answer("2.13.0+cpu False None\n") == {
        "torch": "2.13.0+cpu",
        "cuda_available": False,
        "cuda": None,
    }
    assert jupyter.parse_answer("1.3.0 True 10.1") == {
        "torch": "1.3.0",
        "cuda_available": True,
        "cuda": "10.1",
    }
    with pytest.raises(ValueError, match="unexpected kernel output"):
        jupyter.parse_answer("2.13.0+cpu False")
    with pytest.raises(ValueError, match="unexpected kernel output"):
        jupyter.parse_answer("Traceback (most recent call last)")


class FakeSocket:
    """Replays kernel messages; answers only after the request was sent (its msg_id)."""

    def __init__(self, replies: list[tuple[str, dict[str, Any]]], foreign: bool = True) -> None:
        self.replies = replies
        self.sent: list[dict[str, Any]] = []
        self.foreign = foreign

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def recv(self) -> str:
        msg_id = self.sent[-1]["header"]["msg_id"]
        if self.foreign:  # a message of another request comes first and is ignored
            self.foreign = False
            return json.dumps(
                {
                    "msg_type": "stream",
                    "parent_header": {"msg_id": "other"},
                    "content": {"name": "stdout", "text": "noise"},
                }
            )
        kind, content = self.replies.pop(0)
        return json.dumps(
            {
                "msg_type": kind,
                "parent_header": {"msg_id": msg_id},
                "header": {"msg_type": kind},
                "content": content,
            }
        )


def test_execute_collects_stdout_until_reply_and_idle() -> None:
    ws = FakeSocket(
        [
            ("status", {"execution_state": "busy"}),
            ("stream", {"name": "stdout", "text": "2.13.0+cpu "}),
            ("stream", {"name": "stdout", "text": "False None\n"}),
            ("execute_reply", {"status": "ok"}),
            ("status", {"execution_state": "idle"}),
        ]
    )
    assert jupyter.execute(ws, jupyter.CODE, timeout=5) == "2.13.0+cpu False None"
    assert ws.sent[0]["content"]["code"] == (
        "import torch; print(torch.__version__, torch.cuda.is_available(), torch.version.cuda)"
    )


def test_execute_raises_the_kernel_error() -> None:
    ws = FakeSocket(
        [("error", {"ename": "ModuleNotFoundError", "evalue": "No module named 'torch'"})]
    )
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: No module named 'torch'"):
        jupyter.execute(ws, jupyter.CODE, timeout=5)


PROFILE = {"name": "lab-a", "endpoint_url": "http://10.0.0.5:5000", "probe_bucket": "probe"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "SignatureDoesNotMatch",
            "profile lab-a at http://10.0.0.5:5000: key pair refused during put "
            "(SignatureDoesNotMatch: the secret key does not match the access key); check the "
            "access_key/secret_key of object_storage_profiles entry 'lab-a' (Vault)",
        ),
        (
            "InvalidAccessKeyId",
            "profile lab-a at http://10.0.0.5:5000: key pair refused during put "
            "(InvalidAccessKeyId: the access key is unknown to the server); check the "
            "access_key/secret_key of object_storage_profiles entry 'lab-a' (Vault)",
        ),
        (
            "NoSuchBucket",
            "profile lab-a at http://10.0.0.5:5000: bucket 'probe' does not exist; create it or "
            "set create_bucket: true in object_storage_profiles entry 'lab-a'",
        ),
        ("SlowDown", "profile lab-a at http://10.0.0.5:5000: put failed (SlowDown: wait)"),
    ],
    ids=["signature", "unknown-key", "no-bucket", "other"],
)
def test_probe_explains_in_one_line(code: str, expected: str) -> None:
    line = probe.explain(PROFILE, "put", code, "wait")
    assert line == expected
    assert "\n" not in line


SECRET_NAME = re.compile(r"(token|password|secret_key|access_key|api_key)$")
REFERENCE = re.compile(r"^\{\{\s*(vault_\w+|lookup\('ansible\.builtin\.env', '\w+'\))\s*\}\}$")


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [kv for k, v in node.items() for kv in _walk(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [kv for i, v in enumerate(node) for kv in _walk(v, f"{path}[{i}]")]
    return [(path, node)]


def test_example_inventory_secrets_are_references() -> None:
    """Every secret-named value in inventories/example is a vault_ or env reference."""
    found = []
    for path in sorted((ROOT / "inventories" / "example").rglob("*.yml")):
        text = path.read_text(encoding="utf-8")
        if text.startswith("$ANSIBLE_VAULT"):
            continue
        for key, value in _walk(yaml.safe_load(text) or {}):
            if SECRET_NAME.search(key.rsplit(".", 1)[-1]):
                found.append((f"{path.name}:{key}", value))
                assert isinstance(value, str), (path, key)
                assert REFERENCE.match(value.strip()), (path, key)
    # The notebook token and both storage keys of the example are among them.
    names = {k.rsplit(":", 1)[1] for k, _ in found}
    assert {
        ".jupyterlab_token",
        ".object_storage_profiles[0].access_key",
        ".object_storage_profiles[0].secret_key",
    } <= names, names


def test_fleet_report_environment_section(tmp_path: Path) -> None:
    """scripts/report.py's "Notebooks and storage" section: named fields only, no token."""
    import report  # scripts/report.py (pythonpath)

    for sub, doc in {
        "plan": {"host": "h1", "gpu_info": {"gpus": []}, "plan": {"ok": True}},
        "smoke": {"host": "h1", "ok": True, "required": [], "not_passed": [], "layers": []},
        "jupyterlab": {
            "host": "h1",
            "verdict": "pass",
            "url": "http://127.0.0.1:8888/lab",
            "tunnel": "ssh -N -L 8888:127.0.0.1:8888 h1",
            "display_name": "PyTorch 2.13.0 (CPU)",
            "torch": "2.13.0+cpu",
            "cuda": None,
            "cuda_available": False,
            "token": "must-never-be-copied",
        },
        "storage": {
            "host": "h1",
            "profiles": [
                {"profile": "a", "verdict": "pass", "reason": "ok"},
                {
                    "profile": "b",
                    "verdict": "fail",
                    "reason": "profile b at http://x: key pair refused",
                },
            ],
        },
    }.items():
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "h1.json").write_text(json.dumps(doc))
    fleet = report.build(tmp_path)
    assert fleet["environment"] == [
        {
            "host": "h1",
            "notebook": "pass",
            "url": "http://127.0.0.1:8888/lab",
            "tunnel": "ssh -N -L 8888:127.0.0.1:8888 h1",
            "kernel": "PyTorch 2.13.0 (CPU)",
            "kernel_torch": "2.13.0+cpu",
            "kernel_cuda": None,
            "cuda_available": False,
            "storage": {"a": "pass", "b": "fail"},
            "storage_reasons": ["profile b at http://x: key pair refused"],
        }
    ]
    md = report.render_md(fleet)
    assert (
        "| h1 | pass | http://127.0.0.1:8888/lab | PyTorch 2.13.0 (CPU) | 2.13.0+cpu | none "
        "| a pass, b fail |" in md
    )
    assert "must-never-be-copied" not in md + json.dumps(fleet)
