"""compat.plan.plan_host: the driver-branch policy that playbooks/plan.yml used to run in
Jinja, on the synthetic matrix (tests/unit/conftest.py) whose branches and GPUs are fixed:
A100 is driven by 450/470/535, the K40m by 450/470 only; 2.0.0+cu118 needs 520.61.05 (full)
or 450.80.02 (minor-version compatibility) and 535 runs CUDA 12.2."""

from __future__ import annotations

from typing import Any

import pytest

import compat
from compat.data import Matrix
from compat.plan import SCHEMA_VERSION, plan_host


def gpu(pci: str, name: str, cc: str | None, index: int = 0, **extra: Any) -> dict[str, Any]:
    """A GPU as gpu_info (after the action plugin) reports it."""
    row = {
        "index": index,
        "pci_id": pci,
        "bus_id": f"0000:{index + 1:02x}:00.0",
        "name": name,
        "compute_capability": cc,
        "architecture": None,
        "source": "pci",
        "matrix": cc is not None,
    }
    row.update(extra)
    return row


A100 = gpu("10de:20b0", "A100-SXM4-40GB", "8.0")
K40M = gpu("10de:1023", "Tesla K40m", "3.5")

# Keys other roles and scripts read (nvidia_driver, pytorch, gpu_smoke, report.py).
CONSUMED = ("torch", "variant", "cuda", "torchvision", "channel", "ok", "reasons", "notes")
DRIVER_CONSUMED = ("branch", "min_version", "minor_compat_min_version")


def assert_schema(plan: dict[str, Any]) -> None:
    assert plan["schema_version"] == SCHEMA_VERSION == 2
    for key in (*CONSUMED, "gpus", "container", "install", "refused", "lines", "detected"):
        assert key in plan, key
    for key in (*DRIVER_CONSUMED, "allowed_branches", "packaged_branches", "why"):
        assert key in plan["driver"], key
    for g in plan["gpus"]:
        assert {"name", "compute_capability"} <= set(g), g


def test_packaged_newest_branch_is_kept(mini: Matrix) -> None:
    plan = plan_host(mini, [A100], packaged_branches=[450, 535], os_name="Debian 13")
    assert_schema(plan)
    assert plan["ok"] is True
    assert (plan["torch"], plan["variant"], plan["cuda"]) == ("2.0.0", "cu118", "11.8")
    d = plan["driver"]
    assert (d["branch"], d["compatibility"], d["min_version"]) == (535, "full", "520.61.05")
    assert d["allowed_branches"] == [450, 470, 535]
    assert d["packaged_branches"] == [450, 535]
    assert d["why"].startswith("branch 535 ")
    assert "520.61.05" in d["why"]
    assert not any("not packaged" in r for r in plan["reasons"])


def test_unpackaged_branch_resolves_again_for_the_newest_packaged(mini: Matrix) -> None:
    plan = plan_host(mini, [A100], packaged_branches=["470"], os_name="Debian 12")
    assert plan["ok"] is True
    assert plan["reasons"][0] == (
        "driver branch 535 is not packaged for Debian 12 (packaged: 470); resolved for branch 470"
    )
    d = plan["driver"]
    assert (d["branch"], d["compatibility"]) == (470, "minor-version-compatibility")
    # The line states the minimum that a 470 driver must meet, not CUDA 11.8's full minimum.
    assert d["required_version"] == "450.80.02"
    assert "a 470 driver >= 450.80.02" in d["why"]
    assert any(line.startswith("driver    branch 470") for line in plan["lines"])


def test_no_packaged_branch_drives_the_gpu(mini: Matrix) -> None:
    plan = plan_host(mini, [K40M], packaged_branches=[535], os_name="Debian 13")
    assert plan["ok"] is False
    assert plan["refused"] == []
    assert plan["reasons"][0] == (
        "no driver branch packaged for Debian 13 (535) drives every GPU (Tesla K40m); "
        "branches that do: 450, 470"
    )


def test_pinned_branch_that_drops_a_gpu_is_refused(mini: Matrix) -> None:
    plan = plan_host(mini, [K40M, A100], driver_branch="535", host="n1")
    assert plan["ok"] is False
    assert len(plan["refused"]) == 1
    msg = plan["refused"][0]
    assert msg.startswith("nvidia_driver_branch=535 does not drive every GPU of n1 (Tesla K40m, ")
    assert msg.endswith("Allowed branches for this host: 450, 470")
    assert plan["reasons"] == plan["refused"]


def test_pinned_branch_wins_over_packaged(mini: Matrix) -> None:
    plan = plan_host(mini, [A100], packaged_branches=[535], driver_branch=470)
    assert plan["ok"] is True
    assert plan["driver"]["branch"] == 470
    assert plan["driver"]["pinned"] is True
    assert plan["pinned"] == {"driver_branch": 470, "torch": None}
    assert "pinned in the inventory" in plan["driver"]["why"]


def test_host_without_gpu_is_refused_unless_expected(mini: Matrix) -> None:
    plan = plan_host(mini, [], packaged_branches=[535], host="n2", sysfs_root="/opt/sim/sys")
    assert plan["ok"] is False
    assert "no NVIDIA GPU detected on n2" in plan["refused"][0]
    assert "PCI scan of /opt/sim/sys/bus/pci/devices" in plan["refused"][0]
    assert "gpuprov_expect_gpu: false" in plan["refused"][0]
    cpu = plan_host(mini, [], packaged_branches=[535], host="n2", expect_gpu=False)
    assert cpu["ok"] is True
    assert cpu["refused"] == []
    assert cpu["variant"] == "cpu"
    assert cpu["notes"][-1] == "n2 has no NVIDIA GPU and gpuprov_expect_gpu is false: CPU build"


def test_unknown_gpu_needs_a_pin(mini: Matrix) -> None:
    odd = gpu("10de:ffff", "unknown", None, bus_id="0000:af:00.0")
    refused = plan_host(mini, [odd], host="n3")
    assert refused["ok"] is False
    assert "10de:ffff (bus 0000:af:00.0)" in refused["refused"][0]
    pinned = plan_host(mini, [odd], driver_branch=535, torch="2.0.0")
    assert pinned["ok"] is True
    assert (pinned["driver"]["branch"], pinned["torch"]) == (535, "2.0.0")
    assert pinned["reasons"][0].startswith("stack taken from inventory pins: GPUs 10de:ffff")


def test_gpu_outside_the_matrix_is_judged_by_its_reported_capability(mini: Matrix) -> None:
    # nvidia-smi reported 8.0 for a PCI ID the matrix lacks: used as reported, not guessed.
    new = gpu("10de:fffe", "NVIDIA Future", "8.0", matrix=False)
    plan = plan_host(mini, [new], packaged_branches=[535])
    assert plan["ok"] is True
    assert plan["gpus"][0]["name"] == "sm_80"
    assert plan["variant"] == "cu118"


def test_pinned_torch_carries_install_data(mini: Matrix) -> None:
    plan = plan_host(mini, [A100], packaged_branches=[535], torch="1.9.0")
    assert plan["ok"] is True
    assert (plan["torch"], plan["variant"]) == ("1.9.0", "cu110")
    assert plan["install"]["pip"]["requirements"] == [
        "torch==1.9.0",
        "torchvision==0.10.0",
        "torchaudio==0.9.0",
    ]
    assert plan["install"]["pip"]["index_url"] == "https://download.pytorch.org/whl/cu110"
    assert plan["torchvision"] == "0.10.0"


def test_identical_gpus_are_printed_once_with_a_count(mini: Matrix) -> None:
    gpus = [dict(K40M, index=i, bus_id=f"0000:0{i}:00.0") for i in range(4)]
    plan = plan_host(mini, gpus, packaged_branches=[470])
    assert [g["count"] for g in plan["detected"]] == [4]
    lines = [line for line in plan["lines"] if line.startswith("gpu ")]
    assert lines == ["gpu 0,1,2,3 4 x Tesla K40m  10de:1023  cc 3.5  ?  (pci)"]


def test_bad_branch_pin_names_the_value(mini: Matrix) -> None:
    with pytest.raises(compat.CompatError, match="'five'"):
        plan_host(mini, [A100], driver_branch="five")


def test_public_plan_host_on_the_real_matrix() -> None:
    # Kepler's last driver branch is 470 (NVIDIA's Kepler end-of-support notice), so a
    # K40m host on an OS that packages only 535 and 550 gets no plan.
    plan = compat.plan_host([K40M], packaged_branches=[535, 550], os_name="Debian 13")
    assert plan["ok"] is False
    assert plan["driver"]["allowed_branches"][-1] == 470
