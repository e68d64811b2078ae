#!/usr/bin/env python3
"""Fail when a git-tracked file holds a secret: cloud keys, private keys, literal tokens, vaults.

    scripts/secret_scan.py            # every file `git ls-files` lists
    scripts/secret_scan.py FILE ...   # these files

Rules (each finding prints FILE:LINE: RULE, never the matched text):

- ``aws-access-key-id``: an AWS-style access key ID (AKIA/ASIA/ABIA/ACCA + 16 characters).
  AWS's documented example keys (ending in ``EXAMPLE``) are allowed: roles refuse them anyway.
- ``aws-secret-access-key``: a 40-character secret assigned to ``aws_secret_access_key`` or
  ``secret_key``/``secret_access_key``.
- ``private-key``: a PEM/OpenSSH private key block.
- ``literal-secret``: in YAML, a ``*token``, ``*password``, ``*secret_key``, ``*access_key`` or
  ``*api_key`` variable whose value is a literal rather than a template (``{{ vault_... }}``,
  ``{{ lookup('ansible.builtin.env', ...) }}``).
- ``unencrypted-vault``: a file named ``vault``/``vault.yml``/``vault.yaml`` that does not start
  with ``$ANSIBLE_VAULT``.

A line may opt out with a trailing ``secret-scan: allow`` comment (test fixtures only).
Exit codes: 0 clean, 1 findings, 2 usage error.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

ALLOW = "secret-scan: allow"
RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b")),
    (
        "aws-secret-access-key",
        re.compile(
            r"(?i)\b(?:aws_secret_access_key|secret_access_key|secret_key)\b[\"']?\s*[:=]\s*"
            r"[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"
        ),
    ),
    ("private-key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
)
LITERAL_SECRET = re.compile(
    r"^\s*-?\s*[\"']?(?P<key>[A-Za-z0-9_]*(?:token|password|secret_key|access_key|api_key))[\"']?"
    r"\s*:\s*(?P<value>\S.*?)\s*(?:#.*)?$",
    re.IGNORECASE,
)
YAML_SUFFIXES = {".yml", ".yaml"}
VAULT_NAMES = {"vault", "vault.yml", "vault.yaml"}


class Finding(NamedTuple):
    path: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}"


def _literal(value: str) -> bool:
    """A YAML value that is a literal string, not a template, number, boolean or empty."""
    v = value.strip().strip("\"'")
    if not v or v in {"[]", "{}", "|", ">", ">-", "|-", "null", "~", "true", "false"}:
        return False
    if "{{" in v or v.startswith(("!vault", "$ANSIBLE_VAULT", "[", "{")):
        return False
    return not v.isdigit()


def scan_text(path: str, text: str) -> list[Finding]:
    findings: list[Finding] = []
    name = Path(path).name
    if name in VAULT_NAMES and text.strip() and not text.startswith("$ANSIBLE_VAULT"):
        findings.append(Finding(path, 1, "unencrypted-vault"))
    is_yaml = Path(path).suffix in YAML_SUFFIXES
    for number, line in enumerate(text.splitlines(), 1):
        if ALLOW in line:
            continue
        for rule, pattern in RULES:
            for match in pattern.finditer(line):
                if rule == "aws-access-key-id" and match.group(0).endswith("EXAMPLE"):
                    continue
                findings.append(Finding(path, number, rule))
        if is_yaml:
            m = LITERAL_SECRET.match(line)
            if m and _literal(m.group("value")):
                findings.append(Finding(path, number, "literal-secret"))
    return findings


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [root / p for p in out.split("\0") if p]


def scan_files(paths: Iterable[Path], root: Path | None = None) -> list[Finding]:
    findings: list[Finding] = []
    for path in paths:
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if b"\0" in data[:8192]:
            continue  # binary
        shown = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        findings += scan_text(shown, data.decode("utf-8", errors="replace"))
    return findings


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a.startswith("-") for a in args):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    root = Path.cwd()
    paths = [Path(a) for a in args] if args else tracked_files(root)
    findings = scan_files(paths, root)
    for finding in findings:
        print(finding)
    if findings:
        print(f"secret_scan: {len(findings)} finding(s) in {len(paths)} files", file=sys.stderr)
        return 1
    print(f"secret_scan: {len(paths)} files clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
