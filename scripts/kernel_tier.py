#!/usr/bin/env python3
"""The kernel tier: the nvidia_driver role's kernel path on a real Debian 12 kernel.

    scripts/kernel_tier.py [--lab NAME] [--branches 470,535] [--reboot-gate BRANCH] [--keep]

For each driver branch, on a Debian 12 lab host (a systemd container from scripts/lab.py,
with the GPU profile that branch drives: 470 on the Tesla K40m host, 535 on the M40 host):

1. install the current Debian 12 kernel (the version `linux-image-amd64` depends on), so a
   VM can boot it;
2. run the nvidia_driver role for real with `nvidia_driver_kernel_version` set to that
   kernel and `nvidia_driver_container_kernel_build: true`: the role installs the kernel's
   headers, DKMS builds nvidia.ko for that kernel (not the running one), nouveau is
   blacklisted and the initramfs of that kernel is regenerated;
3. export the container's file system to an ext4 disk image (`mkfs.ext4 -d`, no loop mount)
   and boot it with QEMU TCG (the Debian kernel and the initramfs the role built), SSH by a
   user-mode network forward on 127.0.0.1;
4. check from outside: the kernel booted, nouveau is not loaded and is blacklisted inside the
   initramfs, `modinfo nvidia` matches the branch and the kernel, `modprobe nvidia` fails only
   because there is no GPU;
5. (one branch, 470 by default) the role's reboot gate against the VM: a run that needs no
   reboot does not reboot, a run that changes the nouveau blacklist reboots and waits for SSH,
   the re-run changes nothing.

Nothing is simulated in the VM: no GPU is present, which is the point of step 4. Times of
every step are printed as a table at the end (and written to .lab/NAME/kernel-tier.json).

Exit codes: 0 every check passed, 1 a check or a step failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from gpuprov_lab.site import ansible_env, ansible_tool, log_run

REPO = Path(__file__).resolve().parent.parent
LAB_PY = REPO / "scripts" / "lab.py"
DRIVER_PLAYBOOK = REPO / "playbooks" / "driver.yml"
STATE_ROOT = REPO / ".lab"
DEFAULT_LAB = "kernel"

# Branch -> lab GPU profile that the branch drives on Debian 12 (scripts/lab/profiles.yaml).
BRANCH_PROFILES: Mapping[int, str] = {470: "k40m", 535: "m40"}
RELEASE = "bookworm"
# The metapackage whose Depends names the current Debian 12 kernel ABI.
KERNEL_METAPACKAGE = "linux-image-amd64"
# Controller packages the tier needs (Debian names); `make test-kernel` installs them.
CONTROLLER_PACKAGES: tuple[str, ...] = ("qemu-system-x86", "e2fsprogs")

# The tier hosts' initramfs holds only what the VM's root needs (virtio, ext4): every package
# transaction regenerates it, and MODULES=most takes minutes per run on 2 shared cores. The
# nouveau blacklist reaches the initramfs either way (mkinitramfs copies /etc/modprobe.d).
INITRAMFS_CONF = "/etc/initramfs-tools/conf.d/gpuprov-kernel-tier.conf"
INITRAMFS_HOOK = "/etc/initramfs-tools/hooks/gpuprov-kernel-tier"
INITRAMFS_MODULES: tuple[str, ...] = ("virtio_pci", "virtio_blk", "virtio_net", "ext4")


def initramfs_files() -> dict[str, tuple[str, int]]:
    """Path -> (content, mode) of the tier hosts' initramfs-tools configuration."""
    hook = (
        "#!/bin/sh\n"
        "# gpuprov kernel tier: the modules the VM's root file system needs.\n"
        '[ "$1" = prereqs ] && exit 0\n'
        ". /usr/share/initramfs-tools/hook-functions\n"
        f"manual_add_modules {' '.join(INITRAMFS_MODULES)}\n"
    )
    return {INITRAMFS_CONF: ("MODULES=list\n", 0o644), INITRAMFS_HOOK: (hook, 0o755)}


VM_MEMORY_MB = 2048
VM_DISK_SLACK_MB = 1536
SSH_WAIT_S = 900.0

KERNEL_RE = re.compile(r"^\d+\.\d+\.\d+-\d+-[a-z0-9]+$")
DEPENDS_RE = re.compile(r"^\s*Depends:\s*linux-image-(\S+)\s*$")
# Unit files the lab image masks because a container has no kernel of its own; a VM needs
# them (udev loads the virtio drivers, remount-fs makes / writable, a console getty helps).
VM_UNMASK: tuple[str, ...] = (
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "systemd-modules-load.service",
    "systemd-remount-fs.service",
    "getty.target",
    "serial-getty@ttyS0.service",
)
NETWORK_UNIT = "[Match]\nName=eth* en*\n\n[Network]\nDHCP=ipv4\n"
FSTAB = "/dev/vda / ext4 rw,relatime 0 1\n"


DEBIAN_VARS = REPO / "roles" / "nvidia_driver" / "vars" / "Debian.yml"


def module_name(branch: int, os_version: str = "12", vars_file: Path = DEBIAN_VARS) -> str:
    """The module file DKMS installs for a branch, read from the role's own map (Debian
    renames nvidia.ko per flavour; `modinfo nvidia` does not follow its install rule)."""
    data = yaml.safe_load(vars_file.read_text(encoding="utf-8"))
    names: Mapping[int, str] = data["_nvidia_driver_kernel_module_names"][os_version]
    return str(names.get(branch, "nvidia"))


class TierError(Exception):
    """A step or a check failed (exit 1)."""


# ---------------------------------------------------------------------------
# Pure parts (unit-tested in tests/unit/test_kernel_tier.py)


def kernel_from_depends(text: str) -> str:
    """`apt-cache depends linux-image-amd64` -> the kernel release it pulls, e.g.
    '6.1.0-41-amd64'. Raises TierError when no single kernel is named."""
    found = {m.group(1) for line in text.splitlines() if (m := DEPENDS_RE.match(line))}
    kernels = sorted(k for k in found if KERNEL_RE.match(k))
    if len(kernels) != 1:
        raise TierError(
            f"{KERNEL_METAPACKAGE} should depend on exactly one kernel image, found "
            f"{kernels or 'none'} in:\n{text.strip()}"
        )
    return kernels[0]


def parse_modinfo(text: str) -> dict[str, str]:
    """`modinfo` output -> field -> value (first occurrence of each field)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and " " not in key and key not in fields:
            fields[key] = value.strip()
    return fields


def module_problems(info: Mapping[str, str], branch: int, kernel: str) -> list[str]:
    """What is wrong with a `modinfo nvidia` answer for this branch and kernel (empty: ok)."""
    problems: list[str] = []
    version = info.get("version", "")
    if not version.startswith(f"{branch}."):
        problems.append(f"version {version or '(none)'} is not branch {branch}")
    vermagic = info.get("vermagic", "").split()
    if not vermagic or vermagic[0] != kernel:
        problems.append(f"vermagic {' '.join(vermagic) or '(none)'} is not kernel {kernel}")
    filename = info.get("filename", "")
    if not filename.startswith(f"/lib/modules/{kernel}/"):
        problems.append(f"file {filename or '(none)'} is not under /lib/modules/{kernel}/")
    return problems


def modprobe_means_no_gpu(rc: int, stderr: str) -> bool:
    """True when `modprobe nvidia` failed the way it does on a machine without an NVIDIA GPU:
    the module exists and was inserted, and its init refused with ENODEV."""
    return rc != 0 and "No such device" in stderr and "not found" not in stderr


def initramfs_blacklists_nouveau(listing: str, blacklist: str) -> bool:
    """Whether `lsinitramfs` lists the role's nouveau blacklist file (path without '/')."""
    wanted = blacklist.lstrip("/")
    return any(line.strip().lstrip("/") == wanted for line in listing.splitlines())


def recap_counts(output: str, host: str) -> dict[str, int]:
    """The PLAY RECAP counters of one host in ansible-playbook output."""
    pattern = re.compile(rf"^{re.escape(host)}\s*:\s*(.*)$", re.MULTILINE)
    matches = pattern.findall(output)
    if not matches:
        raise TierError(f"no PLAY RECAP line for {host}")
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", matches[-1])}


def qemu_argv(
    qemu: str,
    kernel_image: Path,
    initrd: Path,
    disk: Path,
    ssh_port: int,
    console_log: Path,
    memory_mb: int = VM_MEMORY_MB,
) -> list[str]:
    """QEMU TCG (KVM guests hang on the machines this runs on), serial console to a file,
    SSH forwarded from 127.0.0.1 only."""
    return [
        qemu,
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-smp",
        "1",
        "-m",
        str(memory_mb),
        "-nographic",
        "-monitor",
        "none",
        "-serial",
        f"file:{console_log}",
        "-kernel",
        str(kernel_image),
        "-initrd",
        str(initrd),
        "-append",
        "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1",
        "-drive",
        f"file={disk},format=raw,if=virtio",
        "-netdev",
        f"user,id=net0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
        "-device",
        "virtio-net-pci,netdev=net0",
    ]


def disk_size_mb(tree_bytes: int, slack_mb: int = VM_DISK_SLACK_MB) -> int:
    """Size of the ext4 image for a tree: its size plus room for the role's re-runs."""
    return tree_bytes // (1024 * 1024) + slack_mb


def vm_hostvars(key_file: Path, known_hosts: Path, port: int) -> dict[str, Any]:
    """Inventory variables of the VM: real /sys (no gpu_info_sysfs_root: no simulated GPU)."""
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": port,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(key_file),
        "ansible_ssh_common_args": (
            f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
        ),
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def role_vars(branch: int, kernel: str, *, container: bool, reboot: bool) -> dict[str, Any]:
    """Extra vars of a kernel-tier role run. In the VM nvidia-persistenced is left out: it
    cannot start without a GPU (the container runs skip it anyway)."""
    out: dict[str, Any] = {
        "nvidia_driver_branch": branch,
        "nvidia_driver_kernel_version": kernel,
        "nvidia_driver_reboot_allowed": reboot,
    }
    if container:
        out["nvidia_driver_container_kernel_build"] = True
    else:
        out["nvidia_driver_persistence_mode"] = False
    return out


def prepare_vm_tree(root: Path, hostname: str) -> None:
    """Turn an exported container tree into a bootable VM root: unmask what the lab image
    masks for containers, DHCP on eth0 with systemd-networkd, an fstab, a hostname."""
    system = root / "etc" / "systemd" / "system"
    for unit in VM_UNMASK:
        path = system / unit
        if path.is_symlink() and str(path.readlink()) == "/dev/null":
            path.unlink()
    network = root / "etc" / "systemd" / "network"
    network.mkdir(parents=True, exist_ok=True)
    (network / "20-kernel-tier.network").write_text(NETWORK_UNIT, encoding="utf-8")
    wants = system / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "systemd-networkd.service"
    if not link.exists() and not link.is_symlink():
        link.symlink_to("/lib/systemd/system/systemd-networkd.service")
    (root / "etc" / "fstab").write_text(FSTAB, encoding="utf-8")
    (root / "etc" / "hostname").write_text(hostname + "\n", encoding="utf-8")
    (root / "etc" / "hosts").write_text(
        f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n", encoding="utf-8"
    )
    resolv = root / "etc" / "resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("nameserver 10.0.2.3\n", encoding="utf-8")
    # A container's /run tmpfs never reaches the image; the role's reboot flag must not either.
    flag = root / "run" / "gpuprov-reboot-required"
    if flag.exists():
        flag.unlink()
    # Docker's marker files: Ansible's virtualization facts read /.dockerenv and would call
    # the VM a docker guest, and the role would skip modprobe and the reboot as in a container.
    for marker in (".dockerenv", ".dockerinit"):
        (root / marker).unlink(missing_ok=True)


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


# ---------------------------------------------------------------------------
# Side effects


@dataclasses.dataclass
class Timings:
    rows: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        log(f"{name} ...")
        start = time.monotonic()
        try:
            yield
        finally:
            elapsed = time.monotonic() - start
            self.rows.append((name, elapsed))
            log(f"{name}: {elapsed:.0f}s")


@dataclasses.dataclass
class Results:
    timings: Timings = dataclasses.field(default_factory=Timings)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    failures: list[str] = dataclasses.field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        log(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)


def log(msg: str) -> None:
    print(f"[kernel-tier {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(
    argv: Sequence[str], *, check: bool = True, timeout: float = 3600, **kw: Any
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, timeout=timeout, **kw
    )
    if check and proc.returncode != 0:
        raise TierError(
            f"{' '.join(argv[:6])} ... failed (rc {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclasses.dataclass(frozen=True)
class Lab:
    name: str

    @property
    def inventory(self) -> Path:
        return STATE_ROOT / self.name / "hosts.yml"

    def up(self, hosts: Mapping[str, str]) -> None:
        spec = ",".join(f"{h}={p}:{RELEASE}" for h, p in hosts.items())
        run([sys.executable, str(LAB_PY), "--lab", self.name, "up", "--hosts", spec])

    def hostvars(self, host: str) -> dict[str, Any]:
        inv = yaml.safe_load(self.inventory.read_text(encoding="utf-8"))
        hv: dict[str, Any] = inv["all"]["children"]["lab"]["hosts"][host]
        return hv

    def container(self, host: str) -> str:
        return str(self.hostvars(host)["lab_container"])

    def write(self, host: str, path: str, content: str, mode: int) -> None:
        run(
            [
                "docker",
                "exec",
                "-i",
                self.container(host),
                "sh",
                "-c",
                f'mkdir -p "$(dirname {path})" && cat > {path} && chmod {mode:o} {path}',
            ],
            input=content,
        )

    def exec(self, host: str, command: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return run(["docker", "exec", self.container(host), "sh", "-c", command], **kw)


def ansible_playbook(
    inventory: Path, host: str, extra: Mapping[str, Any], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    exe = ansible_tool("ansible-playbook")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        # Fresh facts every run (kernel, boot, GPUs change under the tier), cached apart from
        # other labs that reuse host names.
        ANSIBLE_GATHERING="implicit",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(inventory.parent / "facts"),
    )
    # A lab inventory (.lab/NAME/hosts.yml) has the lab's vault in group_vars; the VM's own
    # inventory has none.
    env = ansible_env(inventory.parent.name, base=env)
    argv = [exe, "-i", str(inventory), str(DRIVER_PLAYBOOK), "--limit", host]
    argv += ["-e", json.dumps(dict(extra))]
    started = time.monotonic()
    proc = run(argv, check=False, env=env, cwd=REPO, timeout=7200)
    # Every run's output beside its inventory (the lab's state directory, or the VM's work
    # directory, which --keep keeps): a failed check can be read after the fact.
    log_file = log_run(
        inventory.parent / "runs",
        argv,
        proc.returncode,
        time.monotonic() - started,
        proc.stdout,
        proc.stderr,
        f"kernel tier: {host}",
    )
    if check and proc.returncode != 0:
        raise TierError(
            f"{' '.join(argv[:6])} ... failed (rc {proc.returncode}, log {log_file}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def current_kernel(lab: Lab, host: str) -> str:
    lab.exec(host, "apt-get update -qq")
    out = lab.exec(host, f"apt-cache depends {KERNEL_METAPACKAGE}").stdout
    return kernel_from_depends(out)


def build_branch(lab: Lab, host: str, branch: int, res: Results) -> str:
    with res.timings.step(f"{branch}: kernel image install"):
        for path, (content, mode) in initramfs_files().items():
            lab.write(host, path, content, mode)
        kernel = current_kernel(lab, host)
        lab.exec(
            host,
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            # zstd: initramfs-tools' default compressor (gzip without it: slower, larger)
            f"linux-image-{kernel} initramfs-tools zstd",
        )
    res.facts[f"{branch}.kernel"] = kernel
    with res.timings.step(f"{branch}: role run with DKMS build"):
        proc = ansible_playbook(
            lab.inventory, host, role_vars(branch, kernel, container=True, reboot=False)
        )
    res.facts[f"{branch}.container_run"] = recap_counts(proc.stdout, host)
    info = parse_modinfo(lab.exec(host, f"modinfo -k {kernel} {module_name(branch)}").stdout)
    problems = module_problems(info, branch, kernel)
    res.facts[f"{branch}.modinfo"] = {
        k: info.get(k, "") for k in ("filename", "version", "vermagic", "signer")
    }
    res.check(
        not problems,
        f"{branch}: container modinfo nvidia ({'; '.join(problems) or info.get('version')})",
    )
    return kernel


def export_image(lab: Lab, host: str, workdir: Path, res: Results, branch: int) -> Path:
    tree = workdir / "root"
    tree.mkdir()
    with res.timings.step(f"{branch}: image export (docker export + mkfs.ext4 -d)"):
        with subprocess.Popen(
            ["docker", "export", lab.container(host)], stdout=subprocess.PIPE
        ) as exp:
            untar = subprocess.run(
                ["tar", "-x", "--numeric-owner", "-C", str(tree), "-f", "-"],
                stdin=exp.stdout,
                capture_output=True,
                check=False,
            )
        if exp.returncode != 0 or untar.returncode != 0:
            raise TierError(
                f"docker export {lab.container(host)} | tar -x failed: "
                f"{untar.stderr.decode()[-2000:]}"
            )
        prepare_vm_tree(tree, f"vm-{host}")
        size = int(run(["du", "-sb", str(tree)]).stdout.split()[0])
        disk = workdir / "disk.img"
        run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-L",
                "root",
                "-d",
                str(tree),
                str(disk),
                f"{disk_size_mb(size)}M",
            ]
        )
    res.facts[f"{branch}.image_mb"] = disk_size_mb(size)
    return tree


@dataclasses.dataclass
class VM:
    proc: subprocess.Popen[bytes]
    port: int
    hostvars: dict[str, Any]
    console: Path

    def ssh(
        self, command: str, *, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        hv = self.hostvars
        return run(
            [
                "ssh",
                "-i",
                str(hv["ansible_ssh_private_key_file"]),
                "-p",
                str(self.port),
                *str(hv["ansible_ssh_common_args"]).split(),
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "ConnectTimeout=10",
                "root@127.0.0.1",
                command,
            ],
            check=check,
            timeout=timeout,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def boot_vm(
    lab: Lab, host: str, tree: Path, kernel: str, workdir: Path, res: Results, branch: int
) -> VM:
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise TierError("qemu-system-x86_64 is missing: apt-get install qemu-system-x86")
    hv = lab.hostvars(host)
    port = free_port()
    known_hosts = workdir / "known_hosts"
    keys = sorted((tree / "etc" / "ssh").glob("ssh_host_*_key.pub"))
    known_hosts.write_text(
        "".join(f"[127.0.0.1]:{port} {' '.join(k.read_text().split()[:2])}\n" for k in keys),
        encoding="utf-8",
    )
    vars_ = vm_hostvars(Path(hv["ansible_ssh_private_key_file"]), known_hosts, port)
    console = workdir / "console.log"
    argv = qemu_argv(
        qemu,
        tree / "boot" / f"vmlinuz-{kernel}",
        tree / "boot" / f"initrd.img-{kernel}",
        workdir / "disk.img",
        port,
        console,
    )
    with res.timings.step(f"{branch}: VM boot to SSH (QEMU TCG)"):
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        vm = VM(proc, port, vars_, console)
        wait_ssh(vm)
    return vm


def wait_ssh(vm: VM, timeout: float = SSH_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if vm.proc.poll() is not None:
            raise TierError(f"QEMU exited ({vm.proc.returncode}); console: {vm.console}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            if vm.ssh("true", check=False, timeout=30).returncode == 0:
                return
        time.sleep(3)
    raise TierError(f"no SSH from the VM after {timeout:.0f}s; console: {vm.console}")


def check_vm(vm: VM, branch: int, kernel: str, res: Results) -> None:
    with res.timings.step(f"{branch}: VM checks"):
        uname = vm.ssh("uname -r").stdout.strip()
        res.check(uname == kernel, f"{branch}: VM runs kernel {kernel} (uname -r: {uname})")
        lsmod = vm.ssh("cat /proc/modules").stdout
        res.check(
            not any(line.split()[0] == "nouveau" for line in lsmod.splitlines() if line),
            f"{branch}: nouveau not loaded",
        )
        listing = vm.ssh(f"lsinitramfs /boot/initrd.img-{kernel}").stdout
        res.check(
            initramfs_blacklists_nouveau(listing, "/etc/modprobe.d/blacklist-nouveau.conf"),
            f"{branch}: initramfs carries /etc/modprobe.d/blacklist-nouveau.conf",
        )
        info = parse_modinfo(vm.ssh(f"modinfo {module_name(branch)}").stdout)
        problems = module_problems(info, branch, kernel)
        res.check(
            not problems,
            f"{branch}: VM modinfo nvidia: {'; '.join(problems) or info.get('version')}",
        )
        probe = vm.ssh("modprobe nvidia", check=False)
        res.facts[f"{branch}.modprobe"] = {"rc": probe.returncode, "stderr": probe.stderr.strip()}
        dmesg = vm.ssh("dmesg | grep -E 'NVRM|nvidia' | tail -n 8", check=False).stdout.strip()
        res.facts[f"{branch}.dmesg"] = dmesg
        res.check(
            modprobe_means_no_gpu(probe.returncode, probe.stderr),
            f"{branch}: modprobe nvidia fails for lack of a GPU ({probe.stderr.strip()})",
        )


def vm_inventory(vm: VM, workdir: Path) -> Path:
    path = workdir / "vm-hosts.yml"
    inv = {"all": {"children": {"gpu_nodes": {"hosts": {"kernel-vm": vm.hostvars}}}}}
    path.write_text(yaml.safe_dump(inv), encoding="utf-8")
    return path


def boot_id(vm: VM) -> str:
    return vm.ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def reboot_gate(vm: VM, branch: int, kernel: str, workdir: Path, res: Results) -> None:
    inv = vm_inventory(vm, workdir)
    extra = role_vars(branch, kernel, container=False, reboot=True)
    before = boot_id(vm)
    with res.timings.step(f"{branch}: VM role run 1 (nothing needs a reboot)"):
        first = ansible_playbook(inv, "kernel-vm", extra)
    res.facts[f"{branch}.vm_run1"] = recap_counts(first.stdout, "kernel-vm")
    res.check(boot_id(vm) == before, f"{branch}: run 1 did not reboot (no reboot needed)")
    res.check(
        "No GPU on this machine" in first.stdout,
        f"{branch}: readiness says 'No GPU on this machine'",
    )
    vm.ssh("rm -f /etc/modprobe.d/blacklist-nouveau.conf")
    with res.timings.step(f"{branch}: VM role run 2 (blacklist removed: initramfs + reboot)"):
        second = ansible_playbook(inv, "kernel-vm", extra)
    after = boot_id(vm)
    res.facts[f"{branch}.vm_run2"] = recap_counts(second.stdout, "kernel-vm")
    res.check(after != before, f"{branch}: run 2 rebooted the VM and waited for SSH")
    with res.timings.step(f"{branch}: VM role run 3 (re-run)"):
        third = ansible_playbook(inv, "kernel-vm", extra)
    counts = recap_counts(third.stdout, "kernel-vm")
    res.facts[f"{branch}.vm_run3"] = counts
    res.check(
        counts.get("changed", -1) == 0 and boot_id(vm) == after,
        f"{branch}: re-run changed nothing and did not reboot ({counts})",
    )


def headers_mismatch(lab: Lab, host: str, branch: int, res: Results) -> None:
    """A kernel without headers in the archive is refused in preflight, the package named."""
    bogus = "6.1.0-9-amd64"
    with res.timings.step("headers mismatch preflight"):
        proc = ansible_playbook(
            lab.inventory,
            host,
            role_vars(branch, bogus, container=True, reboot=False),
            check=False,
        )
    res.check(
        proc.returncode != 0 and f"Install linux-headers-{bogus}" in proc.stdout,
        f"kernel {bogus} without headers refused naming linux-headers-{bogus}",
    )
    res.check(
        recap_counts(proc.stdout, host).get("changed", -1) == 0, "headers mismatch: nothing changed"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernel_tier.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lab", default=os.environ.get("GPUPROV_LAB_NAME", DEFAULT_LAB))
    parser.add_argument("--branches", default="470,535")
    parser.add_argument(
        "--reboot-gate",
        type=int,
        default=470,
        help="branch whose VM runs the reboot gate (0: none; default: the first one built)",
    )
    parser.add_argument(
        "--no-vm", action="store_true", help="build and check in the container only"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (disk images)")
    args = parser.parse_args(argv)
    try:
        branches = [int(b) for b in args.branches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--branches {args.branches!r}: want integers, e.g. 470,535")
    unknown = [b for b in branches if b not in BRANCH_PROFILES]
    if unknown:
        parser.error(
            f"--branches: no Debian 12 lab profile for {unknown}; known: {list(BRANCH_PROFILES)}"
        )
    lab = Lab(args.lab)
    res = Results()
    # All tier hosts, whichever branches run: `lab.py up` removes hosts it is not given.
    hosts = {f"kt-{profile}": profile for profile in BRANCH_PROFILES.values()}
    # Disk images of a few GB each, under the lab's git-ignored state directory.
    (STATE_ROOT / lab.name).mkdir(parents=True, exist_ok=True)
    workroot = Path(tempfile.mkdtemp(prefix="kernel-tier-", dir=STATE_ROOT / lab.name))
    try:
        with res.timings.step("lab up"):
            lab.up(hosts)
        # Cheapest check first: it needs no build.
        headers_mismatch(lab, f"kt-{BRANCH_PROFILES[branches[0]]}", branches[0], res)
        for branch in branches:  # one DKMS build at a time (CPU-heavy)
            host = f"kt-{BRANCH_PROFILES[branch]}"
            kernel = build_branch(lab, host, branch, res)
            if args.no_vm:
                continue
            workdir = workroot / str(branch)
            workdir.mkdir()
            tree = export_image(lab, host, workdir, res, branch)
            vm = boot_vm(lab, host, tree, kernel, workdir, res, branch)
            try:
                check_vm(vm, branch, kernel, res)
                if branch == args.reboot_gate:
                    reboot_gate(vm, branch, kernel, workdir, res)
            finally:
                vm.stop()
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
    except TierError as exc:
        res.failures.append(str(exc))
        log(f"FAIL {exc}")
    finally:
        if not args.keep:
            shutil.rmtree(workroot, ignore_errors=True)
    total = sum(t for _, t in res.timings.rows)
    print(
        format_table(
            [(k, f"{v:6.0f}s") for k, v in res.timings.rows] + [("total", f"{total:6.0f}s")]
        )
    )
    report = {
        "timings": dict(res.timings.rows),
        "total_s": total,
        "facts": res.facts,
        "failures": res.failures,
    }
    out = STATE_ROOT / lab.name / "kernel-tier.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    log(f"report: {out}")
    return 1 if res.failures else 0


if __name__ == "__main__":
    sys.exit(main())
