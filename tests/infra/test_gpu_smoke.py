"""Behaviour of a host after the gpu_smoke role (playbooks/smoke.yml): the smoke scripts on
the host are gpuprov's own, and the hardware layer passes there now, against the GPUs the
host's PCI bus shows.

pytest tests/infra/test_gpu_smoke.py --hosts=ansible://all --ansible-inventory=INV

The files expected are the role's list (roles/gpu_smoke/vars/main.yml _gpu_smoke_scripts),
the hardware probe (plugins/module_utils/gpu_probe.py) and compat's host modules
(compat.HOST_MODULES), compared byte for byte with this checkout. L0 runs with the GPU count
read from the PCI bus here (conftest.host_gpus), not from the role's report.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import as_root, host_gpus, role_vars, skip_outside_play

REPO = Path(__file__).resolve().parents[2]


def _scripts() -> list[str]:
    data = yaml.safe_load((REPO / "roles" / "gpu_smoke" / "vars" / "main.yml").read_text())
    return [str(name) for name in data["_gpu_smoke_scripts"]]


@pytest.fixture
def smoke(host: Any) -> dict[str, Any]:
    skip_outside_play(host, "gpu_smoke")
    return role_vars(host, "gpu_smoke")


def _files() -> dict[str, Path]:
    """Path on the host (relative to gpu_smoke_scripts_dir) -> the file in this checkout."""
    import compat

    files = {name: REPO / "scripts" / "smoke" / name for name in _scripts()}
    files["gpu_probe.py"] = REPO / "plugins" / "module_utils" / "gpu_probe.py"
    for name in compat.HOST_MODULES:
        files[f"compat/{name}"] = REPO / "compat" / name
    return files


def test_the_smoke_scripts_are_gpuprovs_own(host: Any, smoke: dict[str, Any]) -> None:
    base = smoke["gpu_smoke_scripts_dir"]
    with as_root(host):
        for rel, local in sorted(_files().items()):
            f = host.file(f"{base}/{rel}")
            assert f.is_file, f"{base}/{rel} is missing"
            assert f.sha256sum == hashlib.sha256(local.read_bytes()).hexdigest(), (
                f"{base}/{rel} differs from {local.relative_to(REPO)}"
            )
            assert f.user == "root", (rel, f.user)
            assert not f.mode & 0o022, (rel, oct(f.mode))


def test_the_hardware_layer_passes_on_the_gpus_the_bus_shows(
    host: Any, smoke: dict[str, Any]
) -> None:
    count = len(host_gpus(host))
    sysfs = smoke["gpu_smoke_sysfs_root"]
    out = host.run(
        "python3 %s/run_all.py --layers L0 --required L0 --sysfs-root %s --expected-count %s",
        smoke["gpu_smoke_scripts_dir"],
        sysfs,
        str(count),
    )
    assert out.stdout.startswith("{"), out.stderr[-800:]
    report = json.loads(out.stdout)
    layers = {v["layer"]: v for v in report["layers"]}
    assert layers["L0"]["status"] == "pass", layers["L0"]
    assert out.rc == 0, report
