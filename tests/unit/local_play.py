"""A real ansible-playbook run of a test's playbook over the local connection, with the
repository's ansible.cfg, on two inventory names (h1, h2) of this one machine."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_local_play(
    book: Path,
    tmp_path: Path,
    env: dict[str, str] | None = None,
    rc: int = 0,
    extra: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``book`` on h1 and h2 (its own fact cache under ``tmp_path``; ``env`` added;
    ``extra`` arguments of ansible-playbook) and check its exit status is ``rc``."""
    full = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        **(env or {}),
    }
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "h1,h2,", "-c", "local"]
    proc = subprocess.run(
        [*argv, *extra, str(book)], capture_output=True, text=True, env=full, cwd=ROOT, check=False
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr
    return proc
