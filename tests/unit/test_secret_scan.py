"""The CI secret scan (scripts/secret_scan.py): it catches planted secrets, and the repo is clean.

Planted values are built at run time, so this file itself holds no key the scan would flag.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import secret_scan  # scripts/secret_scan.py, the tool under test (pythonpath)

ROOT = Path(__file__).resolve().parents[2]
SCAN = ROOT / "scripts" / "secret_scan.py"

# Shaped like real keys, assembled here (never a literal in the repository).
PLANTED_KEY_ID = "AKIA" + "Z7QK2MWN4RTB6YHX"
PLANTED_SECRET = "wK9" + "pZ" * 18 + "q"  # 40 characters


@pytest.mark.parametrize(
    ("name", "text", "rule"),
    [
        ("creds.ini", f"aws_access_key_id = {PLANTED_KEY_ID}\n", "aws-access-key-id"),
        ("creds.ini", f"aws_secret_access_key = {PLANTED_SECRET}\n", "aws-secret-access-key"),
        ("vars.yml", f"secret_key: {PLANTED_SECRET}\n", "aws-secret-access-key"),
        ("key.pem", "-----BEGIN OPENSSH " + "PRIVATE KEY-----\n", "private-key"),
        ("vars.yml", "jupyterlab_token: s3cr3t-t0ken-value-123456\n", "literal-secret"),
        ("vars.yml", "  - access_key: minio-lab-access\n", "literal-secret"),
        ("vault.yml", "vault_ngc_api_key: abc\n", "unencrypted-vault"),
    ],
    ids=["key-id", "secret", "yaml-secret", "private-key", "token", "access-key", "open-vault"],
)
def test_planted_secret_is_found(tmp_path: Path, name: str, text: str, rule: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(SCAN), str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1, proc.stdout
    assert f"{path}:1: {rule}" in proc.stdout
    # The finding names file, line and rule, never the secret.
    assert PLANTED_KEY_ID not in proc.stdout + proc.stderr
    assert PLANTED_SECRET not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "text",
    [
        'jupyterlab_token: "{{ vault_jupyterlab_token }}"\n',
        "secret_key: \"{{ lookup('ansible.builtin.env', 'MINIO_SECRET_KEY') }}\"\n",
        "jupyterlab_token_min_length: 32\n",
        'jupyterlab_token: ""\n',
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n",
        f"access_key: {PLANTED_KEY_ID}  # secret-scan: allow\n",
    ],
    ids=["vault-ref", "env-lookup", "number", "empty", "aws-doc-example", "pragma"],
)
def test_references_and_examples_pass(tmp_path: Path, text: str) -> None:
    path = tmp_path / "vars.yml"
    path.write_text(text, encoding="utf-8")
    assert secret_scan.scan_files([path]) == []


def test_repository_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCAN)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_usage_error() -> None:
    assert secret_scan.main(["--help"]) == 2
