"""Unit tests for the gpu_info module and its action plugin's enrichment.

Hardware is faked at the narrowest seams and nowhere else:

- PCI: a temporary sysfs tree (``<tmp>/bus/pci/devices/<bus>/{vendor,device,class}``)
  passed as ``sysfs_root``, the same seam the lab uses.
- NVML: ``gpu_info._import_pynvml`` is monkeypatched to return a fake pynvml module (or to
  raise ImportError, as on a host without nvidia-ml-py).
- nvidia-smi: ``gpu_info.run_smi`` is monkeypatched to return ``(rc, csv, stderr)`` as the
  real binary would, including the R470 error for the ``compute_cap`` field.
- The compat matrix: a stub with ``gpu_by_pci``, the documented ``compat`` API.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import pytest

REPO = Path(__file__).resolve().parents[2]


import gpu_info  # noqa: E402  # plugins/modules is on pytest's pythonpath
import gpu_info_action  # noqa: E402  # registered by conftest.py (its file name clashes)

K40M_SMI_R470 = "0, 00000000:3B:00.0, 0x102310DE, Tesla K40m, 11441 MiB, 470.256.02\n"
A100_SMI = "0, 00000000:07:00.0, 0x20B010DE, NVIDIA A100-SXM4-40GB, 40960 MiB, 550.163.01, 8.0\n"


def make_sysfs(root: Path, devices: dict[str, tuple[str, str, str]]) -> Path:
    """Write <root>/bus/pci/devices/<bus>/{vendor,device,class}."""
    for bus, (vendor, device, pci_class) in devices.items():
        base = root / "bus" / "pci" / "devices" / bus
        base.mkdir(parents=True)
        (base / "vendor").write_text(vendor + "\n")
        (base / "device").write_text(device + "\n")
        (base / "class").write_text(pci_class + "\n")
    return root


class FakeModule:
    """Just enough AnsibleModule for gather(): params, get_bin_path, run_command."""

    def __init__(self, sysfs_root: str, smi: str | None = "/usr/bin/nvidia-smi") -> None:
        self.params = {"sysfs_root": sysfs_root, "nvidia_smi_path": smi}
        self.commands: list[list[str]] = []

    def get_bin_path(self, name: str) -> str | None:
        return None

    def run_command(self, cmd: list[str]) -> tuple[int, str, str]:
        self.commands.append(cmd)
        return 127, "", "not found"


@dataclass(frozen=True)
class StubGPU:
    name: str
    compute_capability: str
    architecture: str


class StubMatrix:
    """Stands in for compat.Matrix (gpu_by_pci only)."""

    rows: ClassVar[dict[str, StubGPU]] = {
        "10de:1023": StubGPU("Tesla K40m", "3.5", "kepler"),
        "10de:17fd": StubGPU("Tesla M40", "5.2", "maxwell"),
        "10de:20b0": StubGPU("A100-SXM4-40GB", "8.0", "ampere"),
    }

    def gpu_by_pci(self, pci_id: str) -> StubGPU | None:
        return self.rows.get(pci_id)


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without nvidia-ml-py: the pynvml import fails."""

    def fail() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(gpu_info, "_import_pynvml", fail)


@pytest.fixture
def no_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi present but the driver is not loaded (what the lab containers see)."""
    monkeypatch.setattr(gpu_info, "run_smi", lambda *_a: (9, "", "NVIDIA-SMI has failed"))


def test_pci_fallback_reads_only_nvidia_gpus(tmp_path: Path, no_nvml: None, no_smi: None) -> None:
    """Only vendor 0x10de, class 0x0300xx/0x0302xx counts; not the GPU's audio function."""
    sysfs = make_sysfs(
        tmp_path,
        {
            "0000:3b:00.0": ("0x10de", "0x1023", "0x030200"),
            "0000:3b:00.1": ("0x10de", "0x0e1a", "0x040300"),
            "0000:00:02.0": ("0x8086", "0x3e92", "0x030000"),
            "0000:5e:00.0": ("0x10de", "0x17fd", "0x030000"),
        },
    )
    facts = gpu_info.gather(FakeModule(str(sysfs)))
    assert [(g["bus_id"], g["pci_id"], g["source"]) for g in facts["gpus"]] == [
        ("0000:3b:00.0", "10de:1023", "pci"),
        ("0000:5e:00.0", "10de:17fd", "pci"),
    ]
    assert facts["gpus"][0]["name"] == "unknown"
    assert facts["gpus"][0]["compute_capability"] is None
    assert facts["source"] == "pci"
    assert facts["labels"]["nvidia.com/gpu.count"] == "2"


def test_no_gpu_at_all(tmp_path: Path, no_nvml: None, no_smi: None) -> None:
    """A missing sysfs tree means no GPUs and source unknown, not an error."""
    facts = gpu_info.gather(FakeModule(str(tmp_path / "absent")))
    assert facts["gpus"] == []
    assert facts["source"] == "unknown"
    assert facts["labels"] == {"nvidia.com/gpu.count": "0"}


def test_smi_r470_retries_without_compute_cap(
    tmp_path: Path, no_nvml: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_smi is faked: the compute_cap query fails as on R470, the retry without it answers."""
    calls: list[tuple[str, ...]] = []

    def fake_run_smi(_module: Any, _smi: str, fields: tuple[str, ...]) -> tuple[int, str, str]:
        calls.append(fields)
        if "compute_cap" in fields:
            return 2, "", 'Field "compute_cap" is not a valid field to query.'
        return 0, K40M_SMI_R470, ""

    monkeypatch.setattr(gpu_info, "run_smi", fake_run_smi)
    facts = gpu_info.gather(FakeModule(str(tmp_path)))
    assert len(calls) == 2
    assert "compute_cap" in calls[0]
    assert "compute_cap" not in calls[1]
    gpu = facts["gpus"][0]
    assert gpu == {
        "index": 0,
        "pci_id": "10de:1023",
        "bus_id": "0000:3b:00.0",
        "name": "Tesla K40m",
        "compute_capability": None,
        "architecture": None,
        "memory_mib": 11441,
        "driver_version": "470.256.02",
        "source": "nvidia-smi",
    }
    assert facts["labels"]["nvidia.com/cuda.driver-version.major"] == "470"
    assert facts["labels"]["nvidia.com/cuda.driver-version.minor"] == "256"
    assert facts["labels"]["nvidia.com/cuda.driver-version.revision"] == "02"
    assert facts["labels"]["nvidia.com/cuda.driver-version.full"] == "470.256.02"


def test_smi_with_compute_cap(
    tmp_path: Path, no_nvml: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_smi is faked with a current driver's CSV; the 'NVIDIA ' prefix is dropped."""
    monkeypatch.setattr(gpu_info, "run_smi", lambda *_a: (0, A100_SMI, ""))
    facts = gpu_info.gather(FakeModule(str(tmp_path)))
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["compute_capability"], gpu["pci_id"]) == (
        "A100-SXM4-40GB",
        "8.0",
        "10de:20b0",
    )
    assert facts["labels"]["nvidia.com/gpu.compute.major"] == "8"
    assert facts["labels"]["nvidia.com/gpu.memory"] == "40960"


def test_smi_command_line(tmp_path: Path) -> None:
    """The real run_smi builds the documented query through module.run_command."""
    module = FakeModule(str(tmp_path))
    gpu_info.run_smi(module, "/usr/bin/nvidia-smi", (*gpu_info.SMI_FIELDS, "compute_cap"))
    assert module.commands == [
        [
            "/usr/bin/nvidia-smi",
            "--query-gpu=index,pci.bus_id,pci.device_id,name,memory.total,driver_version,compute_cap",
            "--format=csv,noheader",
        ]
    ]


def _fake_pynvml(fail_init: bool = False) -> ModuleType:
    fake = ModuleType("pynvml")

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = init  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    fake.nvmlSystemGetDriverVersion = lambda: "550.163.01"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetPciInfo = lambda _h: SimpleNamespace(  # type: ignore[attr-defined]
        busId=b"00000000:5E:00.0", pciDeviceId=0x17FD10DE
    )
    fake.nvmlDeviceGetName = lambda _h: b"Tesla M40"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda _h: SimpleNamespace(total=12 * 1024**3)  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCudaComputeCapability = lambda _h: (5, 2)  # type: ignore[attr-defined]
    return fake


def test_nvml_answers_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_import_pynvml is monkeypatched with a fake pynvml; nvidia-smi must not be asked."""
    monkeypatch.setattr(gpu_info, "_import_pynvml", _fake_pynvml)

    def must_not_run(*_a: Any) -> tuple[int, str, str]:
        raise AssertionError("nvidia-smi asked although NVML answered")

    monkeypatch.setattr(gpu_info, "run_smi", must_not_run)
    facts = gpu_info.gather(FakeModule(str(tmp_path)))
    gpu = facts["gpus"][0]
    assert gpu["source"] == "nvml"
    assert (gpu["pci_id"], gpu["bus_id"], gpu["compute_capability"], gpu["memory_mib"]) == (
        "10de:17fd",
        "0000:5e:00.0",
        "5.2",
        12288,
    )


def test_nvml_library_missing_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml imports but nvmlInit fails (libnvidia-ml absent): nvidia-smi is the next source."""
    monkeypatch.setattr(gpu_info, "_import_pynvml", lambda: _fake_pynvml(fail_init=True))
    monkeypatch.setattr(gpu_info, "run_smi", lambda *_a: (0, A100_SMI, ""))
    facts = gpu_info.gather(FakeModule(str(tmp_path)))
    assert facts["source"] == "nvidia-smi"


def test_enrich_fills_from_matrix(tmp_path: Path, no_nvml: None, no_smi: None) -> None:
    """The action plugin's enrichment completes a PCI-only GPU from a stub matrix."""
    sysfs = make_sysfs(tmp_path, {"0000:3b:00.0": ("0x10de", "0x1023", "0x030200")})
    facts = gpu_info_action.enrich(gpu_info.gather(FakeModule(str(sysfs))), StubMatrix())
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["compute_capability"], gpu["architecture"]) == (
        "Tesla K40m",
        "3.5",
        "kepler",
    )
    assert facts["unknown_pci_ids"] == []
    assert facts["labels"]["nvidia.com/gpu.product"] == "Tesla-K40m"
    assert facts["labels"]["nvidia.com/gpu.family"] == "kepler"
    assert facts["labels"]["nvidia.com/gpu.compute.major"] == "3"
    assert facts["labels"]["nvidia.com/gpu.compute.minor"] == "5"
    json.dumps(facts)


def test_enrich_keeps_driver_reported_values(
    tmp_path: Path, no_nvml: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R470 nvidia-smi gives the name but no compute capability: the matrix fills only the gaps."""
    monkeypatch.setattr(
        gpu_info,
        "run_smi",
        lambda _m, _s, f: (2, "", "") if "compute_cap" in f else (0, K40M_SMI_R470, ""),
    )
    facts = gpu_info_action.enrich(gpu_info.gather(FakeModule(str(tmp_path))), StubMatrix())
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["compute_capability"], gpu["architecture"], gpu["source"]) == (
        "Tesla K40m",
        "3.5",
        "kepler",
        "nvidia-smi",
    )


def test_unknown_pci_id_is_never_guessed(tmp_path: Path, no_nvml: None, no_smi: None) -> None:
    """An ID the matrix lacks stays name 'unknown' with compute_capability null."""
    sysfs = make_sysfs(tmp_path, {"0000:af:00.0": ("0x10de", "0xffff", "0x030200")})
    facts = gpu_info_action.enrich(gpu_info.gather(FakeModule(str(sysfs))), StubMatrix())
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["compute_capability"], gpu["architecture"]) == ("unknown", None, None)
    assert facts["unknown_pci_ids"] == ["10de:ffff at 0000:af:00.0"]
    assert "nvidia.com/gpu.compute.major" not in facts["labels"]
    assert facts["labels"]["nvidia.com/gpu.family"] == "unknown"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({".dockerenv": ""}, "docker"),
        ({"run/.containerenv": ""}, "podman"),
        ({"proc/1/environ": "PATH=/bin\0container=lxc\0"}, "lxc"),
        ({"proc/1/cgroup": "0::/\n"}, "none"),
    ],
    ids=["docker", "podman", "environ-lxc", "bare-metal"],
)
def test_detect_container(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    for rel, text in files.items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    assert gpu_info.detect_container(str(tmp_path)) == expected


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled\n", "disabled"),
        ("EFI variables are not supported\n", "unknown"),
    ],
    ids=["enabled", "disabled", "no-efi"],
)
def test_secure_boot(tmp_path: Path, out: str, expected: str) -> None:
    """mokutil is faked by a module whose run_command returns its output."""

    class MokutilModule(FakeModule):
        def get_bin_path(self, name: str) -> str | None:
            return "/usr/bin/mokutil"

        def run_command(self, cmd: list[str]) -> tuple[int, str, str]:
            return 0, out, ""

    assert gpu_info.secure_boot_state(MokutilModule(str(tmp_path))) == expected


def test_secure_boot_without_mokutil(tmp_path: Path) -> None:
    assert gpu_info.secure_boot_state(FakeModule(str(tmp_path))) == "unknown"


def test_build_module_sets_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_module() declares check mode support and runs commands with LC_ALL=C."""
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    args = json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_check_mode": True}})
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(args))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    module = gpu_info.build_module()
    assert module.check_mode is True
    assert module.params["sysfs_root"] == "/sys"
    assert module.run_command_environ_update["LC_ALL"] == "C"
