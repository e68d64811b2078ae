"""Behaviour of a host after the pytorch role (playbooks/pytorch.yml): its environment holds
the build the inventory or the plan calls for, imports it, and reports that build's CUDA.

pytest tests/infra/test_pytorch.py --hosts=ansible://all --ansible-inventory=INV

The expected build comes from the inventory and compat, never from what the role wrote:
compat.install_for of the pin (pytorch_torch_version + pytorch_variant) or, unpinned, of
the plan that compat.plan_host makes from the host's PCI devices as playbooks/plan.yml does
(conftest.plan_intent). Hosts with pytorch_method: none skip with pytorch_skip_reason; with
the container method torch lives in an image (the role's verify step runs it there).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import as_root, plan_intent, role_vars, skip_outside_play

# What the environment's interpreter reports: installed versions (importlib.metadata, no
# import), then torch's own view (import, CUDA version), and sys.prefix.
PROBE = r"""
import importlib.metadata as md, json, sys
names = json.loads(sys.argv[1])
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
out = {"versions": {n: version(n) for n in names}, "prefix": sys.prefix}
try:
    import torch
    out["cuda"] = torch.version.cuda
    out["torch"] = torch.__version__
    out["tensor"] = float(torch.ones(3).sum())
except Exception as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


@pytest.fixture
def env(host: Any) -> dict[str, Any]:
    """The environment's interpreter and the install document it must match."""
    import compat  # the controller's compat package (pip install -e .)

    skip_outside_play(host, "pytorch")
    conf = role_vars(host, "pytorch")
    method = conf["pytorch_method"]
    if method == "none":
        pytest.skip(f"pytorch_method: none ({conf.get('pytorch_skip_reason') or 'no reason'})")
    if method == "container":
        pytest.skip("pytorch_method: container (torch is in the image, not on the host)")
    if conf["pytorch_torch_version"]:
        variant = conf["pytorch_variant"]
        base: Any = conf["pytorch_torch_version"] + (f"+{variant}" if variant else "")
    else:
        base = plan_intent(host).get("install")
        if not base:
            pytest.skip("no torch pin and no plan install for this host")
    want = compat.install_for(
        base,
        local_version=bool(conf["pytorch_pin_local_version"]),
        companions=bool(conf["pytorch_install_companions"]),
        torchvision=conf["pytorch_torchvision_version"] or None,
        torchaudio=conf["pytorch_torchaudio_version"] or None,
    )
    prefix = conf["pytorch_venv_path"] if method == "pip" else conf["pytorch_conda_env_path"]
    extras = dict(str(p).split("==", 1) for p in conf["pytorch_packages_extra"] if "==" in str(p))
    names = sorted({*want["want"], *extras})
    out = host.run("%s/bin/python -c %s %s", prefix, PROBE, json.dumps(names))
    assert out.rc == 0, f"{prefix}/bin/python: {out.stderr.strip()[-500:]}"
    return {
        "prefix": prefix,
        "want": want,
        "extras": extras,
        "local": bool(conf["pytorch_pin_local_version"]),
        "probe": json.loads(out.stdout),
    }


def _same(got: str | None, want: str, local: bool) -> bool:
    """pip's view of a pin: with the local label pinned, exactly; else the public version."""
    if got is None:
        return False
    return got == want if local or "+" in want else got.split("+")[0] == want


def test_the_environment_holds_the_wanted_build(env: dict[str, Any]) -> None:
    versions = env["probe"]["versions"]
    for name, want in env["want"]["want"].items():
        assert _same(versions.get(name), want, env["local"]), (name, versions.get(name), want)


def test_torch_imports_and_reports_the_builds_cuda(env: dict[str, Any]) -> None:
    probe = env["probe"]
    assert "import_error" not in probe, probe.get("import_error")
    assert probe["tensor"] == 3.0
    assert probe["cuda"] == env["want"]["cuda"], (probe["cuda"], env["want"]["cuda"])


def test_the_extra_packages_are_at_their_pins(env: dict[str, Any]) -> None:
    if not env["extras"]:
        pytest.skip("pytorch_packages_extra pins nothing")
    versions = env["probe"]["versions"]
    for name, want in env["extras"].items():
        assert versions.get(name) == want, (name, versions.get(name), want)


def test_nobody_else_can_write_the_environment(host: Any, env: dict[str, Any]) -> None:
    with as_root(host):
        writable = host.run(
            "find %s -xdev -perm -o+w ! -type l ! -type s -print -quit", env["prefix"]
        )
        assert writable.rc == 0, writable.stderr
        assert writable.stdout.strip() == "", f"world-writable: {writable.stdout.strip()}"
        owner = host.file(env["prefix"]).user
    assert owner == "root", owner
