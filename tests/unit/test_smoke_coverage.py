"""The smoke scripts judge kernel coverage with gpuprov's own compat.rules, copied to the host.

The hosts have no compat package, so the gpu_smoke role (and scripts/fabfile.py) copy the
stdlib-only modules compat.HOST_MODULES next to the scripts; no second copy of the
sm/compute rule lives in the scripts. These tests check that the copies are exactly the
modules the host needs, that they import in a clean interpreter (-S -I: no site-packages,
so no PyYAML, no packaging) with only the copied directory on sys.path, and that
l3_cuda.py run as on a host (its own directory, the copied compat/, a fake CPU-only
torch, no NVML, no driver) reports the measured verdict. Nothing else is faked.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from fatbin_builders import write_torch

from compat import HOST_MODULES

ROOT = Path(__file__).resolve().parents[2]
from smoke_modules import SMOKE, smoke  # noqa: E402

sl = smoke("smokelib")


def _copy_compat(dest: Path) -> Path:
    (dest / "compat").mkdir(parents=True)
    for name in HOST_MODULES:
        shutil.copy(ROOT / "compat" / name, dest / "compat" / name)
    return dest


def _module_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (``if TYPE_CHECKING:`` blocks and imports
    inside functions are not run at import time)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            if isinstance(sub, ast.Import):
                found.update(a.name for a in sub.names)
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                found.add(sub.module)
                if sub.module == "compat":
                    found.update(f"compat.{a.name}" for a in sub.names)
    return found


def test_the_role_and_the_fabfile_copy_exactly_these_modules() -> None:
    import gpuprov_files_action as action  # plugins/action/gpuprov_files.py (conftest.py)

    tasks = yaml.safe_load((ROOT / "roles" / "gpu_smoke" / "tasks" / "install.yml").read_text())
    copies = [
        one["names"]
        for t in tasks
        if "gpuprov_files" in t
        for one in action.sets_of(t["gpuprov_files"])
        if one.get("payload") == "compat"
    ]
    # The role holds no list of its own: it asks compat (one source).
    assert copies == ["{{ 'smoke' | gpuprov.fleet.gpu_compat_host_modules }}"]
    import gpu_compat

    assert gpu_compat.gpu_compat_host_modules() == list(HOST_MODULES)
    assert not hasattr(sl, "COMPAT_MODULES")
    # scripts/fabfile.py (another owner) still keeps a copy; held equal here.
    assert importlib.import_module("fabfile").COMPAT_MODULES == HOST_MODULES


def test_the_copied_modules_need_only_the_stdlib_and_each_other() -> None:
    copied = {"compat" if n == "__init__.py" else f"compat.{n[:-3]}" for n in HOST_MODULES}
    for name in HOST_MODULES:
        for mod in _module_level_imports(ROOT / "compat" / name):
            top = mod.split(".")[0]
            assert top in sys.stdlib_module_names or mod in copied, (name, mod)


def test_the_copies_import_in_a_clean_interpreter(tmp_path: Path) -> None:
    host = _copy_compat(tmp_path / "smoke")
    write_torch(tmp_path / "site")
    code = f"""
import json, sys
sys.path.insert(0, {str(host)!r})
from compat import inspect_torch, rules
r = inspect_torch.inspect_path({str(tmp_path / "site")!r})
ours = ("compat", "__main__")
foreign = sorted(m for m in sys.modules
                 if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ours)
print(json.dumps({{"file": inspect_torch.__file__, "foreign": foreign, "sass": r.sass,
                  "k40m": rules.coverage(tuple(r.sass), tuple(r.ptx), (3, 5)),
                  "a100": rules.coverage(tuple(r.sass), tuple(r.ptx), (8, 0))}}))
"""
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["file"] == str(host / "compat" / "inspect_torch.py")
    assert out["foreign"] == []
    assert out["sass"] == ["sm_80", "sm_86", "sm_90"]
    assert (out["k40m"], out["a100"]) == (None, ["sass", "sm_80"])


def test_no_copy_of_the_rule_lives_in_the_scripts() -> None:
    for name in ("coverage", "sass_runs_on", "ptx_runs_on", "parse_arch"):
        assert not hasattr(sl, name), name
    _, rules = sl.import_compat()
    assert rules.__file__ == str(ROOT / "compat" / "rules.py")


FAKE_TORCH_INIT = """from . import version
from .version import __version__


class cuda:
    @staticmethod
    def is_available():
        return False
"""


def test_l3_runs_as_on_a_host_with_a_cpu_build_and_a_k40m(tmp_path: Path) -> None:
    """The scripts and the copied compat/ in one directory, run with -S (no site-packages:
    neither gpuprov's compat nor pynvml); torch is a fake CPU build on PYTHONPATH."""
    host = _copy_compat(tmp_path / "smoke")
    for script in SMOKE.glob("*.py"):
        shutil.copy(script, host / script.name)
    # The gpu_smoke role copies the hardware probe next to the scripts.
    shutil.copy(ROOT / "plugins" / "module_utils" / "gpu_probe.py", host / "gpu_probe.py")
    torch_dir = write_torch(tmp_path / "site", cuda=False)
    (torch_dir / "__init__.py").write_text(FAKE_TORCH_INIT)
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x1023"), ("class", "0x030200")):
        (dev / name).write_text(value + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            str(host / "l3_cuda.py"),
            "--sysfs-root",
            str(tmp_path / "sys"),
            "--gpu",
            "Tesla K40m=3.5",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert proc.returncode == 1, proc.stderr
    v = json.loads(proc.stdout)
    assert v["status"] == "fail"
    assert v["reason"] == (
        "torch 2.9.1+cpu is a CPU-only build: no CUDA kernels for Tesla K40m sm_35 "
        "(measured from its libraries: no .nv_fatbin section)"
    )
    assert v["details"]["measured"]["path"] == str(torch_dir)
    assert v["details"]["measured"]["cpu_only"] is True
    assert v["hint"].endswith("gpu-compat resolve --gpu 'Tesla K40m'")
