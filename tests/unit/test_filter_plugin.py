"""The Ansible filter plugin: unit tests of the functions, and one real ansible-playbook run
on localhost whose play asserts the filters' output (the same library as the CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]


def _plugin() -> ModuleType:
    import gpu_compat  # plugins/filter is on pytest's pythonpath

    return gpu_compat


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    return _plugin()


def test_filters_are_registered(plugin: ModuleType) -> None:
    names = set(plugin.FilterModule().filters())
    assert names == {
        "gpu_compat_resolve",
        "gpu_compat_check",
        "gpu_compat_gpu",
        "gpu_compat_branch_check",
        "gpu_compat_driver_preflight",
        "gpu_compat_allowed_branches",
        "gpu_compat_plan",
        "gpu_compat_install",
        "gpu_compat_os_packages",
        "gpu_compat_host_modules",
        "gpu_compat_perf_floors",
        "gpu_serving_triton_check",
        "gpu_serving_triton_pick",
        "gpu_serving_onnx_runtimes",
        "gpu_serving_torchserve_check",
    }


def test_perf_floors_are_the_matrix_file_or_the_one_given(plugin: ModuleType, tmp_path) -> None:
    import yaml

    own = yaml.safe_load((ROOT / "compat" / "data" / "perf.yaml").read_text())["floors"]
    assert own
    assert plugin.gpu_compat_perf_floors("") == own
    assert plugin.gpu_compat_perf_floors(None) == own
    mine = tmp_path / "perf.yaml"
    mine.write_text("floors:\n  - {gpu: Tesla K40m, matmul_tflops: 1.0, source: mine}\n")
    assert plugin.gpu_compat_perf_floors(str(mine)) == [
        {"gpu": "Tesla K40m", "matmul_tflops": 1.0, "source": "mine"}
    ]
    mine.write_text("floor: []\n")
    with pytest.raises(AnsibleFilterError, match=r"perf.yaml \(gpu_smoke_perf_file\) holds no"):
        plugin.gpu_compat_perf_floors(str(mine))
    with pytest.raises(AnsibleFilterError, match=r"cannot read .*nope.yaml \(gpu_smoke_perf_f"):
        plugin.gpu_compat_perf_floors(str(tmp_path / "nope.yaml"))


@pytest.mark.parametrize("block", ["DOCUMENTATION", "EXAMPLES", "RETURN"])
def test_the_plugin_documentation_is_yaml(plugin: ModuleType, block: str) -> None:
    # ansible-doc and ansible-lint parse these blocks; a ": " in a plain scalar breaks them.
    import yaml

    assert yaml.safe_load(getattr(plugin, block))


def test_resolve_from_gpu_info_dicts(plugin: ModuleType) -> None:
    facts = [{"pci_id": "10de:1023", "name": "unknown"}, {"pci_id": "10de:17fd"}]
    plan = plugin.gpu_compat_resolve(facts)
    assert plan["ok"] is True
    assert [g["name"] for g in plan["gpus"]] == ["Tesla K40m", "Tesla M40"]
    assert plan["driver"]["branch"] == 470


def test_resolve_cpu_host(plugin: ModuleType) -> None:
    plan = plugin.gpu_compat_resolve([], python="3.11")
    assert (plan["ok"], plan["variant"], plan["cuda"]) == (True, "cpu", None)


def test_check_and_gpu(plugin: ModuleType) -> None:
    assert plugin.gpu_compat_check(["K40m"], "1.2.0+cu100", driver="470.256.02")["compatible"]
    assert plugin.gpu_compat_gpu("10de:17fd")["name"] == "Tesla M40"
    assert plugin.gpu_compat_gpu("10de:ffff") == {}
    assert plugin.gpu_compat_gpu({"pci_id": "10de:1023"})["compute_capability"] == "3.5"


def test_branch_check_names_gpu_and_allowed_branches(plugin: ModuleType) -> None:
    res = plugin.gpu_compat_branch_check(535, [{"pci_id": "10de:1023"}])
    assert res["ok"] is False
    assert res["reasons"][0].startswith(
        "driver branch 535 does not drive Tesla K40m (Kepler): allowed are branches"
    )
    assert max(res["allowed_branches"]) == 470
    assert plugin.gpu_compat_branch_check("470", ["K40m", "M40"])["ok"] is True
    unknown = plugin.gpu_compat_branch_check(471, ["K40m"])
    assert unknown["ok"] is False
    assert "driver branch 471 is not in the matrix: known are" in unknown["reasons"][-1]


def test_allowed_branches_without_a_fake_branch(plugin: ModuleType) -> None:
    allowed = plugin.gpu_compat_allowed_branches([{"pci_id": "10de:1023"}])
    assert allowed == plugin.gpu_compat_branch_check(470, ["K40m"])["allowed_branches"]
    assert allowed[-1] == 470  # Kepler's last branch


def test_plan_from_the_whole_gpu_info_fact(plugin: ModuleType) -> None:
    k40m = {"index": 0, "pci_id": "10de:1023", "name": "Tesla K40m", "compute_capability": "3.5"}
    facts = {"gpus": [k40m], "sysfs_root": "/opt/sim/sys", "source": "pci"}
    plan = plugin.gpu_compat_plan(facts, packaged_branches=[470, 535], host="n1")
    assert plan["ok"] is True
    assert plan["driver"]["branch"] == 470
    empty = plugin.gpu_compat_plan({"gpus": [], "sysfs_root": "/opt/sim/sys"}, host="n1")
    assert "PCI scan of /opt/sim/sys/bus/pci/devices" in empty["refused"][0]
    with pytest.raises(AnsibleFilterError, match="gpuprov_expect_gpu must be true or false"):
        plugin.gpu_compat_plan(facts, expect_gpu="no")


def test_bad_input_raises_filter_errors(plugin: ModuleType) -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_compat_resolve: unknown GPU 'K41m'"):
        plugin.gpu_compat_resolve(["K41m"])
    with pytest.raises(AnsibleFilterError, match="driver branch 'abc' is not a number"):
        plugin.gpu_compat_branch_check("abc", ["K40m"])
    with pytest.raises(AnsibleFilterError, match=r"unknown torch version '9\.9\.9'"):
        plugin.gpu_compat_check(["K40m"], "9.9.9")


def _stats(stdout: str) -> dict[str, int]:
    """The json callback's document (profile_tasks may print its timings around it)."""
    doc, _ = json.JSONDecoder().raw_decode(stdout[stdout.index("{") :])
    stats: dict[str, int] = doc["stats"]["localhost"]
    return stats


@pytest.mark.usefixtures("unmeasured_children")  # its children run no measured file
def test_playbook_asserts_filter_output(tmp_path: Path) -> None:
    """A real ansible-playbook run on localhost (connection local) of a play that asserts what
    the filters return, then a --check run that must write nothing."""
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
        "ANSIBLE_FACT_CACHING": "memory",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    out = tmp_path / "plan.json"
    cmd = [
        str(bindir / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(ROOT / "tests" / "unit" / "playbooks" / "filters.yml"),
        "-e",
        f"plan_out={out}",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    stats = _stats(res.stdout)
    assert stats["failures"] == 0
    assert json.loads(out.read_text())["torch"].startswith("1.")
    out.unlink()
    check = subprocess.run(
        [*cmd, "--check"], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    assert check.returncode == 0, check.stdout[-3000:]
    # --check reports the copy it would make and writes nothing.
    assert _stats(check.stdout)["changed"] == 1
    assert not out.exists()
