"""gpu_compat_driver_preflight: the nvidia_driver role's branch and package set for one host,
and the first check that refuses it, with the message the role prints (the texts below are
written by hand, as an operator reads them)."""

from __future__ import annotations

from typing import Any

import gpu_compat  # plugins/filter is on pytest's pythonpath
import pytest

K40M = {"pci_id": "10de:1023", "name": "Tesla K40m", "matrix": {"sm": "3.5"}}
A100 = {"pci_id": "10de:20b0", "name": "A100-SXM4-40GB", "matrix": {"sm": "8.0"}}
UNKNOWN = {"pci_id": "10de:ffff", "name": "NVIDIA Device ffff"}
DEBIAN = {
    "12": {
        470: {"kernel": ["nvidia-tesla-470-kernel-dkms"], "userspace": ["nvidia-tesla-470-smi"]},
        535: {"kernel": ["nvidia-kernel-dkms"], "userspace": ["nvidia-smi"]},
    },
    "13": {550: {"kernel": ["nvidia-kernel-dkms"], "userspace": ["nvidia-smi"]}},
}


def _preflight(gpus: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "host": "n1",
        "pin": None,
        "plan": None,
        "distribution": "Debian",
        "os_version": "12",
        "packages": DEBIAN,
        "extra_packages": [],
    }
    args.update(kw)
    return gpu_compat.gpu_compat_driver_preflight(gpus, **args)


def test_the_plan_branch_and_its_packages() -> None:
    got = _preflight([K40M, UNKNOWN], plan={"driver": {"branch": 470}}, extra_packages=["x"])
    assert got["refusal"] == ""
    assert got["branch"] == 470
    assert got["kernel_packages"] == ["nvidia-tesla-470-kernel-dkms"]
    assert got["userspace_packages"] == ["nvidia-tesla-470-smi", "x"]
    assert got["known_gpus"] == [K40M]
    assert got["unknown_gpus"] == [UNKNOWN]
    assert got["branch_check"]["ok"] is True


def test_a_pin_wins_over_the_plan_and_may_be_a_string() -> None:
    got = _preflight([A100], pin="535", plan={"driver": {"branch": 470}})
    assert (got["refusal"], got["branch"], got["userspace_packages"]) == ("", 535, ["nvidia-smi"])


def test_json_keys_as_strings_are_found() -> None:
    table = {"12": {"535": {"kernel": ["k"], "userspace": ["u"]}}}
    got = _preflight([], pin=535, packages=table)
    assert (got["refusal"], got["kernel_packages"]) == ("", ["k"])


def test_an_os_version_without_a_package_map() -> None:
    got = _preflight([K40M], pin=470, os_version="11")
    assert got["refusal"] == (
        "nvidia_driver has no package map for Debian 11; supported versions: 12, 13."
    )
    assert got["kernel_packages"] == []


@pytest.mark.parametrize("branch", [None, "r535", "5.35"])
def test_no_branch(branch: Any) -> None:
    got = _preflight([K40M], pin=branch)
    assert got["refusal"] == (
        "No driver branch for n1: pin nvidia_driver_branch (an integer, e.g. 535) or run "
        f"playbooks/plan.yml first (it sets gpuprov_plan.driver.branch). Got: {branch}."
    )


def test_a_branch_that_drops_a_gpu_names_it_and_the_allowed_branches() -> None:
    got = _preflight([K40M], pin=535)
    assert got["refusal"].startswith(
        "Driver branch 535 does not drive every GPU of n1 (Tesla K40m): "
    )
    assert "Allowed branches for this host: " in got["refusal"]
    assert ", 470. Nothing was changed." in got["refusal"]  # 470 is the K40m's last branch
    assert got["userspace_packages"] == []


def test_unknown_gpus_are_not_checked() -> None:
    assert _preflight([UNKNOWN], pin=535)["refusal"] == ""


def test_a_branch_too_old_for_the_planned_cuda() -> None:
    plan = {"cuda": "12.4", "driver": {"branch": 535, "min_version": "550.54.14"}}
    got = _preflight([A100], pin=535, plan=plan)
    assert got["refusal"] == (
        "Driver branch 535 is too old for the planned CUDA 12.4 (needs driver >= 550.54.14). "
        "Pick a branch of at least 550 or pin an older stack. Nothing was changed."
    )
    # minor-version compatibility lowers the floor
    plan["driver"]["minor_compat_min_version"] = "525.60.13"
    assert _preflight([A100], pin=535, plan=plan)["refusal"] == ""


def test_a_branch_the_os_does_not_package() -> None:
    got = _preflight([A100], pin=550)
    assert got["refusal"] == (
        "Driver branch 550 has no packages on Debian 12; packaged branches: 470, 535. "
        "Nothing was changed."
    )
