"""The kernel tier (scripts/kernel_tier.py): unit tests of its pure parts, and the tier itself.

The tier (`make test-kernel`, marker `kernel`) builds the real nvidia.ko with DKMS for Debian
12's kernel in lab hosts and boots it in a QEMU TCG VM. Nothing is simulated there: the VM has
no GPU, which is what the modprobe check relies on. It runs only when GPUPROV_KERNEL_TIER=1
(set by `make test-kernel`): it takes far longer than CI's lab tests (times in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kernel_tier as kt  # scripts/kernel_tier.py (scripts/ is on pytest's pythonpath)
import pytest

REPO = Path(__file__).resolve().parents[2]


# Captured from `apt-cache depends linux-image-amd64` in a bookworm lab host.
DEPENDS = """linux-image-amd64
  Depends: linux-image-6.1.0-41-amd64
"""

# The shape of `modinfo` on Debian 12 (fields trimmed).
MODINFO = """filename:       /lib/modules/6.1.0-41-amd64/updates/dkms/nvidia-current.ko
alias:          char-major-195-*
version:        535.247.01
supported:      external
license:        NVIDIA
name:           nvidia
vermagic:       6.1.0-41-amd64 SMP preempt mod_unload modversions
signer:         DKMS module signing key
parm:           NvSwitchRegDwords:NvSwitch regkey (charp)
"""


def test_kernel_from_depends() -> None:
    assert kt.kernel_from_depends(DEPENDS) == "6.1.0-41-amd64"


@pytest.mark.parametrize(
    "text",
    [
        "linux-image-amd64\n",
        DEPENDS + "  Depends: linux-image-6.1.0-42-amd64\n",
        "  Depends: linux-image-amd64-signed-template\n",
    ],
)
def test_kernel_from_depends_refuses_none_or_two(text: str) -> None:
    with pytest.raises(kt.TierError, match="exactly one kernel"):
        kt.kernel_from_depends(text)


def test_parse_modinfo_first_field_wins() -> None:
    info = kt.parse_modinfo(MODINFO + "version:        1.0\n")
    assert info["version"] == "535.247.01"
    assert info["signer"] == "DKMS module signing key"
    assert info["filename"].endswith("/nvidia-current.ko")


def test_module_problems_none_for_match() -> None:
    assert kt.module_problems(kt.parse_modinfo(MODINFO), 535, "6.1.0-41-amd64") == []


def test_module_problems_wrong_branch_and_kernel() -> None:
    problems = kt.module_problems(kt.parse_modinfo(MODINFO), 470, "6.1.0-42-amd64")
    assert problems == [
        "version 535.247.01 is not branch 470",
        "vermagic 6.1.0-41-amd64 SMP preempt mod_unload modversions is not kernel 6.1.0-42-amd64",
        "file /lib/modules/6.1.0-41-amd64/updates/dkms/nvidia-current.ko is not under "
        "/lib/modules/6.1.0-42-amd64/",
    ]


def test_module_problems_empty_answer() -> None:
    assert len(kt.module_problems({}, 535, "6.1.0-41-amd64")) == 3


@pytest.mark.parametrize(
    ("rc", "stderr", "expected"),
    [
        (1, "modprobe: ERROR: could not insert 'nvidia_current': No such device\n", True),
        (0, "", False),
        (1, "modprobe: FATAL: Module nvidia not found in directory /lib/modules/x\n", False),
        (1, "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n", False),
    ],
)
def test_modprobe_means_no_gpu(rc: int, stderr: str, expected: bool) -> None:
    assert kt.modprobe_means_no_gpu(rc, stderr) is expected


def test_initramfs_blacklists_nouveau() -> None:
    listing = (
        "usr/lib/modprobe.d\netc/modprobe.d/blacklist-nouveau.conf\netc/modprobe.d/nvidia.conf\n"
    )
    assert kt.initramfs_blacklists_nouveau(listing, "/etc/modprobe.d/blacklist-nouveau.conf")
    assert not kt.initramfs_blacklists_nouveau(
        "etc/modprobe.d/nvidia.conf\n", "/etc/modprobe.d/blacklist-nouveau.conf"
    )


def test_recap_counts_last_recap_of_the_host() -> None:
    out = (
        "PLAY RECAP ***\n"
        "kt-m40 : ok=3 changed=2 unreachable=0 failed=0 skipped=1 rescued=0 ignored=0\n"
        "PLAY RECAP ***\n"
        "kt-m40 : ok=30 changed=0 unreachable=0 failed=0 skipped=9 rescued=0 ignored=0\n"
        "kt-m40x : ok=1 changed=9 unreachable=0 failed=0\n"
    )
    counts = kt.recap_counts(out, "kt-m40")
    assert counts["ok"] == 30
    assert counts["changed"] == 0
    with pytest.raises(kt.TierError):
        kt.recap_counts(out, "other")


def test_qemu_argv_is_tcg_and_forwards_ssh_on_loopback_only() -> None:
    argv = kt.qemu_argv(
        "qemu", Path("/b/vmlinuz"), Path("/b/initrd"), Path("/d.img"), 2222, Path("/c.log")
    )
    assert argv[argv.index("-accel") + 1] == "tcg"
    assert "kvm" not in " ".join(argv)
    assert "user,id=net0,hostfwd=tcp:127.0.0.1:2222-:22" in argv
    assert "root=/dev/vda" in argv[argv.index("-append") + 1]


def test_role_vars_container_and_vm() -> None:
    assert kt.role_vars(470, "k", container=True, reboot=False) == {
        "nvidia_driver_branch": 470,
        "nvidia_driver_kernel_version": "k",
        "nvidia_driver_reboot_allowed": False,
        "nvidia_driver_container_kernel_build": True,
    }
    vm = kt.role_vars(535, "k", container=False, reboot=True)
    assert "nvidia_driver_container_kernel_build" not in vm
    assert vm["nvidia_driver_persistence_mode"] is False
    assert vm["nvidia_driver_reboot_allowed"] is True


def test_role_vars_are_role_variables() -> None:
    """Every variable the tier passes is declared by the role (no typo'd name passes silently)."""
    import yaml

    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    for container in (True, False):
        for key in kt.role_vars(470, "k", container=container, reboot=True):
            assert key in defaults


def test_disk_size_mb() -> None:
    assert kt.disk_size_mb(3 * 1024 * 1024 * 1024, slack_mb=100) == 3172


def test_prepare_vm_tree(tmp_path: Path) -> None:
    system = tmp_path / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    (system / "systemd-udevd.service").symlink_to("/dev/null")
    (system / "apt-daily.timer").symlink_to("/dev/null")
    (tmp_path / "etc" / "resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "gpuprov-reboot-required").write_text("x")
    (tmp_path / ".dockerenv").touch()
    kt.prepare_vm_tree(tmp_path, "vm-kt")
    assert not (tmp_path / ".dockerenv").exists()  # else Ansible sees a docker guest
    assert not (system / "systemd-udevd.service").is_symlink()
    assert (system / "apt-daily.timer").is_symlink()  # other masks are kept
    assert (system / "multi-user.target.wants" / "systemd-networkd.service").is_symlink()
    assert "DHCP=ipv4" in (tmp_path / "etc/systemd/network/20-kernel-tier.network").read_text()
    assert (tmp_path / "etc" / "fstab").read_text().startswith("/dev/vda / ext4")
    assert (tmp_path / "etc" / "hostname").read_text() == "vm-kt\n"
    assert not (tmp_path / "etc" / "resolv.conf").is_symlink()
    assert not (tmp_path / "run" / "gpuprov-reboot-required").exists()
    kt.prepare_vm_tree(tmp_path, "vm-kt")  # idempotent


# ---------------------------------------------------------------------------
# The tier itself (make test-kernel)


@pytest.mark.kernel
@pytest.mark.skipif(
    os.environ.get("GPUPROV_KERNEL_TIER") != "1",
    reason="the kernel tier runs with `make test-kernel` (GPUPROV_KERNEL_TIER=1)",
)
def test_kernel_tier() -> None:
    lab = os.environ.get("GPUPROV_LAB_NAME", "kernel")
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "kernel_tier.py"), "--lab", lab],
        capture_output=True,
        text=True,
        check=False,
        timeout=4 * 3600,
    )
    print(proc.stdout[-20000:])
    if os.environ.get("GPUPROV_LAB_KEEP") != "1":
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "lab.py"), "--lab", lab, "down"],
            capture_output=True,
            check=False,
        )
    report = json.loads((REPO / ".lab" / lab / "kernel-tier.json").read_text())
    assert proc.returncode == 0, report["failures"]
    assert report["failures"] == []
    for branch in (470, 535):
        assert report["facts"][f"{branch}.modinfo"]["version"].startswith(f"{branch}.")


def test_module_name_from_the_role_map() -> None:
    assert kt.module_name(470) == "nvidia-tesla-470"
    assert kt.module_name(999) == "nvidia"
