"""plugins/module_utils/gpu_probe.py: gpuprov's one NVIDIA hardware probe.

Only what a GPU-less machine cannot have is simulated, at the probe's own seams:
the PCI devices (a temporary sysfs tree passed as ``sysfs_root``), NVML (a fake pynvml
returned by the ``importer`` argument) and nvidia-smi (a ``run`` function returning
``(rc, stdout, stderr)`` with canned CSV, as the binary prints it).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gpu_probe as gp  # plugins/module_utils is on pytest's pythonpath
import pytest
import yaml
from pci_tree import K40M, write_pci

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "plugins" / "module_utils" / "gpu_probe.py"

M40_VGA = ("0000:5e:00.0", "0x10de", "0x17fd", "0x030000")  # VGA controller
K40M_AUDIO = ("0000:3b:00.1", "0x10de", "0x0e1a", "0x040300")  # the GPU's audio function
INTEL_VGA = ("0000:00:02.0", "0x8086", "0x3e92", "0x030000")


# --- helpers -------------------------------------------------------------------------------


def test_normalize_bus_id():
    assert gp.normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert gp.normalize_bus_id("0000:5e:00.0\n") == "0000:5e:00.0"


def test_pci_id_from_combined():
    assert gp.pci_id_from_combined(0x102310DE) == "10de:1023"
    assert gp.pci_id_from_combined(0x20B010DE) == "10de:20b0"


def test_strip_vendor():
    assert gp.strip_vendor(" NVIDIA A100-SXM4-40GB ") == "A100-SXM4-40GB"
    assert gp.strip_vendor("Tesla K40m") == "Tesla K40m"


# --- PCI scan ------------------------------------------------------------------------------


def test_read_pci_keeps_nvidia_display_and_3d_controllers_only(tmp_path):
    root = write_pci(tmp_path, K40M, K40M_AUDIO, INTEL_VGA, M40_VGA)
    broken = tmp_path / "bus" / "pci" / "devices" / "0000:af:00.0"
    broken.mkdir()
    (broken / "vendor").write_text("0x10de\n")  # no device or class file: not a GPU we can name
    assert gp.read_pci(str(root)) == [
        {
            "index": 0,
            "pci_id": "10de:1023",
            "bus_id": "0000:3b:00.0",
            "name": "unknown",
            "compute_capability": None,
            "architecture": None,
            "memory_mib": None,
            "driver_version": None,
            "source": "pci",
        },
        {
            "index": 1,
            "pci_id": "10de:17fd",
            "bus_id": "0000:5e:00.0",
            "name": "unknown",
            "compute_capability": None,
            "architecture": None,
            "memory_mib": None,
            "driver_version": None,
            "source": "pci",
        },
    ]


def test_read_pci_of_a_missing_tree_is_empty(tmp_path):
    assert gp.read_pci(str(tmp_path / "absent")) == []


# --- nvidia-smi ----------------------------------------------------------------------------

# Canned output of the real query (gpu_probe.smi_command: --format=csv,noheader, units kept).
A100_CC = "0, 00000000:07:00.0, 0x20B010DE, NVIDIA A100-SXM4-40GB, 40960 MiB, 550.163.01, 8.0\n"
K40M_R470 = "0, 00000000:3B:00.0, 0x102310DE, Tesla K40m, 11441 MiB, 470.256.02\n"
R470_NO_CC = 'Field "compute_cap" is not a valid field to query.'


class FakeSmi:
    """nvidia-smi as ``run(fields)``: answers with canned CSV, or fails like R470."""

    def __init__(self, csv: str, knows_compute_cap: bool = True, rc: int = 0) -> None:
        self.csv, self.knows_compute_cap, self.rc = csv, knows_compute_cap, rc
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, fields: tuple[str, ...]) -> tuple[int, str, str]:
        self.calls.append(fields)
        if self.rc:
            return self.rc, "NVIDIA-SMI has failed because it couldn't communicate\n", ""
        if "compute_cap" in fields and not self.knows_compute_cap:
            return 2, "", R470_NO_CC
        return 0, self.csv, ""


def test_smi_command_is_the_documented_query():
    assert gp.smi_command("/usr/bin/nvidia-smi", gp.smi_fields(compute_cap=True)) == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=index,pci.bus_id,pci.device_id,name,memory.total,driver_version,compute_cap",
        "--format=csv,noheader",
    ]
    assert gp.smi_fields(health=True, compute_cap=False)[-1] == "retired_pages.pending"


def test_query_smi_with_compute_cap():
    smi = FakeSmi(A100_CC)
    got = gp.query_smi(smi)
    assert len(smi.calls) == 1
    assert got == {
        "source": "nvidia-smi",
        "driver_version": "550.163.01",
        "error": None,
        "gpus": [
            {
                "index": 0,
                "pci_id": "10de:20b0",
                "bus_id": "0000:07:00.0",
                "name": "A100-SXM4-40GB",
                "compute_capability": "8.0",
                "architecture": None,
                "memory_mib": 40960,
                "driver_version": "550.163.01",
                "source": "nvidia-smi",
            }
        ],
    }


def test_query_smi_r470_retries_without_compute_cap():
    smi = FakeSmi(K40M_R470, knows_compute_cap=False)
    got = gp.query_smi(smi)
    assert ["compute_cap" in fields for fields in smi.calls] == [True, False]
    assert got is not None
    (gpu,) = got["gpus"]
    assert (gpu["name"], gpu["pci_id"], gpu["memory_mib"]) == ("Tesla K40m", "10de:1023", 11441)
    assert gpu["compute_capability"] is None  # the driver did not say: null, never guessed


def test_query_smi_failing_reports_what_it_said():
    got = gp.query_smi(FakeSmi("", rc=9))
    assert got == {
        "source": "nvidia-smi",
        "driver_version": None,
        "gpus": [],
        "error": "NVIDIA-SMI has failed because it couldn't communicate",
    }


def test_query_smi_without_nvidia_smi():
    assert gp.query_smi(None) is None


def test_parse_smi_csv_health_fields_without_units_and_not_available():
    fields = gp.smi_fields(health=True, compute_cap=False)
    csv = (
        "1, 00000000:0F:00.0, 0x20B010DE, NVIDIA A100-SXM4-40GB, 40960, 550.54.15, GPU-bbbb,"
        " [N/A], [Not Supported], Disabled, 2, Yes\n"
    )
    (gpu,) = gp.parse_smi_csv(csv, fields)
    assert gpu["index"] == 1
    assert gpu["memory_mib"] == 40960
    assert gpu["uuid"] == "GPU-bbbb"
    assert (gpu["temperature_c"], gpu["utilization_pct"]) == (None, None)
    assert (gpu["persistence_mode"], gpu["ecc_uncorrected"]) == (False, 2)
    assert gpu["retired_pages_pending"] is True


def test_parse_smi_csv_rejects_a_row_of_another_width():
    with pytest.raises(ValueError, match="expected 7 columns"):
        gp.parse_smi_csv("0, Tesla K40m\n", gp.smi_fields())


# --- NVML ----------------------------------------------------------------------------------


class NotSupported(Exception):
    """Stands in for pynvml.NVMLError_NotSupported."""


def fake_pynvml(
    fail_init: bool = False, cc: tuple[int, int] | None = (5, 2), fail_name: bool = False
) -> SimpleNamespace:
    """A pynvml with one Tesla M40 (what NVML answers on a host with the driver loaded)."""

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def name(_h: int) -> bytes:
        if fail_name:
            raise RuntimeError("GPU is lost")
        return b"Tesla M40"

    def compute_capability(_h: int) -> tuple[int, int]:
        if cc is None:
            raise NotSupported("Not Supported")
        return cc

    def ecc(_h: int, _kind: int, _counter: int) -> int:
        raise NotSupported("Not Supported")  # GeForce-like: no ECC

    return SimpleNamespace(
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.163.01",
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda _h: SimpleNamespace(
            busId=b"00000000:5E:00.0", pciDeviceId=0x17FD10DE
        ),
        nvmlDeviceGetName=name,
        nvmlDeviceGetMemoryInfo=lambda _h: SimpleNamespace(total=12 * 1024**3),
        nvmlDeviceGetCudaComputeCapability=compute_capability,
        nvmlDeviceGetUUID=lambda _h: b"GPU-m40",
        nvmlDeviceGetTemperature=lambda _h, _sensor: 41,
        nvmlDeviceGetUtilizationRates=lambda _h: SimpleNamespace(gpu=7, memory=1),
        nvmlDeviceGetPersistenceMode=lambda _h: 1,
        nvmlDeviceGetTotalEccErrors=ecc,
        # nvmlDeviceGetRetiredPagesPendingStatus missing, as in an old pynvml
    )


M40_NVML = {
    "index": 0,
    "pci_id": "10de:17fd",
    "bus_id": "0000:5e:00.0",
    "name": "Tesla M40",
    "compute_capability": "5.2",
    "architecture": None,
    "memory_mib": 12288,
    "driver_version": "550.163.01",
    "source": "nvml",
}


def test_query_nvml():
    got = gp.query_nvml(fake_pynvml)
    assert got == {
        "source": "nvml",
        "driver_version": "550.163.01",
        "gpus": [M40_NVML],
        "error": None,
    }


def test_query_nvml_health_fields_are_null_when_not_supported():
    got = gp.query_nvml(fake_pynvml, health=True)
    assert got is not None
    (gpu,) = got["gpus"]
    assert gpu == {
        **M40_NVML,
        "uuid": "GPU-m40",
        "temperature_c": 41,
        "utilization_pct": 7,
        "persistence_mode": True,
        "ecc_uncorrected": None,
        "retired_pages_pending": None,
    }


def test_query_nvml_compute_capability_not_supported_is_null():
    got = gp.query_nvml(lambda: fake_pynvml(cc=None))
    assert got is not None
    assert got["gpus"][0]["compute_capability"] is None


def no_pynvml() -> SimpleNamespace:
    raise ImportError("No module named 'pynvml'")


@pytest.mark.parametrize(
    "importer",
    [no_pynvml, lambda: fake_pynvml(fail_init=True), lambda: fake_pynvml(fail_name=True)],
    ids=["no-pynvml", "no-driver", "fails-mid-way"],
)
def test_query_nvml_none_when_nvml_cannot_answer(importer):
    assert gp.query_nvml(importer) is None


# --- the whole probe: NVML, else nvidia-smi, else PCI ---------------------------------------


def test_probe_takes_nvml_first_and_does_not_ask_nvidia_smi(tmp_path):
    smi = FakeSmi(A100_CC)
    got = gp.probe(str(write_pci(tmp_path, M40_VGA)), fake_pynvml, smi)
    assert (got["source"], got["gpus"], got["driver_version"]) == (
        "nvml",
        [M40_NVML],
        "550.163.01",
    )
    assert smi.calls == []


def test_probe_falls_back_to_nvidia_smi(tmp_path):
    got = gp.probe(str(tmp_path), no_pynvml, FakeSmi(A100_CC))
    assert (got["source"], got["driver_version"], got["smi_error"]) == (
        "nvidia-smi",
        "550.163.01",
        None,
    )
    assert [g["name"] for g in got["gpus"]] == ["A100-SXM4-40GB"]


def test_probe_falls_back_to_the_pci_scan_and_keeps_what_nvidia_smi_said(tmp_path):
    root = write_pci(tmp_path, K40M, K40M_AUDIO)
    got = gp.probe(str(root), no_pynvml, FakeSmi("", rc=9))
    assert got["source"] == "pci"
    assert [(g["pci_id"], g["name"], g["source"]) for g in got["gpus"]] == [
        ("10de:1023", "unknown", "pci")
    ]
    assert got["driver_version"] is None
    assert got["smi_error"].startswith("NVIDIA-SMI has failed")


def test_probe_without_any_gpu(tmp_path):
    got = gp.probe(str(tmp_path / "absent"), no_pynvml, None)
    assert got == {"gpus": [], "source": "unknown", "driver_version": None, "smi_error": None}


def test_merge_pci_fills_a_missing_pci_id_by_bus_id():
    found = [{"index": 0, "bus_id": "0000:3b:00.0", "pci_id": None}]
    pci = [{"index": 0, "bus_id": "0000:3b:00.0", "pci_id": "10de:1023"}]
    assert gp.merge_pci(found, pci)[0]["pci_id"] == "10de:1023"


def test_build_labels():
    assert gp.build_labels([M40_NVML], "550.163.01") == {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.product": "Tesla-M40",
        "nvidia.com/gpu.family": "unknown",
        "nvidia.com/gpu.compute.major": "5",
        "nvidia.com/gpu.compute.minor": "2",
        "nvidia.com/gpu.memory": "12288",
        "nvidia.com/cuda.driver-version.full": "550.163.01",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "163",
        "nvidia.com/cuda.driver-version.revision": "01",
    }


# --- as a program on a host -----------------------------------------------------------------


def test_main_prints_the_probe_as_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gp, "import_pynvml", no_pynvml)
    root = write_pci(tmp_path, K40M)
    missing_smi = str(tmp_path / "no-nvidia-smi")
    assert gp.main(["--sysfs-root", str(root), "--nvidia-smi", missing_smi]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == "pci"
    assert [g["bus_id"] for g in out["gpus"]] == ["0000:3b:00.0"]
    assert out["smi_error"].startswith(missing_smi)


def test_runs_from_stdin_in_a_bare_interpreter(tmp_path):
    """As fabfile runs it: `python3 - --sysfs-root ROOT` with the file's text on stdin, no
    site-packages (no pynvml, no Ansible), isolated."""
    root = write_pci(tmp_path / "sys", K40M)
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            "-I",
            "-",
            "--sysfs-root",
            str(root),
            "--nvidia-smi",
            "/nonexistent",
        ],
        input=PROBE.read_text(encoding="utf-8"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [g["pci_id"] for g in json.loads(proc.stdout)["gpus"]] == ["10de:1023"]


def test_needs_only_the_standard_library_and_python_3_9():
    """Hosts run Debian's python3 (3.9 on bullseye): no newer syntax, no third-party import
    (pynvml is optional and imported only inside import_pynvml)."""
    text = PROBE.read_text(encoding="utf-8")
    tree = ast.parse(text, feature_version=(3, 9))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            if isinstance(node, ast.Call) and any(k.arg == "strict" for k in node.keywords):
                pytest.fail(f"line {node.lineno}: zip(strict=...) needs Python 3.10")
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("__future__", "pynvml"), name
    # Run-time annotations of module-level aliases: no PEP 604 unions or builtin generics.
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            assert not isinstance(node.value.value, ast.Name) or node.value.value.id not in (
                "dict",
                "list",
                "tuple",
            ), ast.unparse(node)


def test_the_gpu_smoke_role_copies_the_probe_next_to_the_scripts():
    import gpuprov_files_action as action  # plugins/action/gpuprov_files.py (conftest.py)

    tasks = yaml.safe_load((ROOT / "roles" / "gpu_smoke" / "tasks" / "install.yml").read_text())
    copies = [
        one for t in tasks if "gpuprov_files" in t for one in action.sets_of(t["gpuprov_files"])
    ]
    probe = next(c for c in copies if c.get("names") == ["gpu_probe.py"])
    assert probe["dest_dir"] == "{{ gpu_smoke_scripts_dir }}"
    # The payload the collection ships: this very file, not a copy of it.
    assert action.payload_dir(probe["payload"]) / "gpu_probe.py" == PROBE


# --- one probe: no second copy in plugins/ or scripts/ ----------------------------------------

# scripts/gpuprov_lab builds the lab's SIMULATED PCI tree (it writes sysfs, never probes it).
NOT_PROBES = (ROOT / "scripts" / "gpuprov_lab",)


ANSIBLE_DOCS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def probe_logic(text: str) -> list[str]:
    """What in a Python source looks like hardware-probe logic (docstrings excepted): a sysfs
    PCI path, an nvidia-smi --query-gpu query, NVIDIA's PCI vendor ID, an NVML session."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in tree.body:  # an Ansible module's DOCUMENTATION, EXAMPLES and RETURN are docs
        names = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and any(n in ANSIBLE_DOCS for n in names):
            docstrings.add(id(node.value))
    found: list[str] = []
    previous = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            value = node.value
            if isinstance(value, str):
                low = value.lower()
                if "bus/pci" in low or "--query-gpu" in low or "0x10de" in low:
                    found.append(f"line {node.lineno}: {value!r}")
                if (previous, value) == ("bus", "pci"):
                    found.append(f"line {node.lineno}: 'bus' / 'pci'")
                previous = value
            elif value == 0x10DE and not isinstance(value, bool):
                found.append(f"line {node.lineno}: 0x10de")
        elif isinstance(node, (ast.Attribute, ast.Name)):
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            if name == "nvmlInit":
                found.append(f"line {node.lineno}: nvmlInit")
    return found


def test_the_detector_finds_the_old_copies():
    """The shapes the three copies had before gpu_probe (so the next test can fail)."""
    smokelib_style = 'base = Path(root) / "bus" / "pci" / "devices"\nNVIDIA_VENDOR = 0x10DE\n'
    fabfile_style = 'Q = "nvidia-smi --query-gpu=index,name --format=csv"\n'
    shell_style = 'scan = f"for d in {root}/bus/pci/devices/*; do case $v in 0x10de:*) ;; esac"\n'
    nvml_style = "def q(nvml):\n    nvml.nvmlInit()\n"
    for text in (smokelib_style, fabfile_style, shell_style, nvml_style):
        assert probe_logic(text), text
    assert probe_logic('"""Reads <root>/bus/pci/devices (vendor 0x10de)."""\n') == []
    assert probe_logic('DOCUMENTATION = "reads <sysfs_root>/bus/pci/devices"\n') == []


def test_gpu_probe_is_the_only_hardware_probe_in_plugins_and_scripts():
    assert probe_logic(PROBE.read_text(encoding="utf-8"))  # the detector sees the real one
    offenders = {}
    for path in sorted([*ROOT.glob("plugins/**/*.py"), *ROOT.glob("scripts/**/*.py")]):
        if path == PROBE or any(path.is_relative_to(p) for p in NOT_PROBES):
            continue
        found = probe_logic(path.read_text(encoding="utf-8"))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    for path in sorted(ROOT.glob("scripts/**/*.sh")):
        text = path.read_text(encoding="utf-8")
        if "bus/pci" in text or "--query-gpu" in text:
            offenders[str(path.relative_to(ROOT))] = ["a PCI scan or an nvidia-smi query"]
    assert offenders == {}


def test_smokelib_imports_without_the_probe_beside_it(tmp_path):
    """dist_launch and model_serving copy smokelib.py (for L5, L6) without gpu_probe.py:
    smokelib imports the probe on first use only."""
    shutil.copy(ROOT / "scripts" / "smoke" / "smokelib.py", tmp_path / "smokelib.py")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import smokelib; "
        "print('gpu_probe' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr


def test_run_command_reports_a_missing_tool_as_127_and_a_hang_as_124():
    """The metrics collector's runner too (nvidia-smi, journalctl)."""
    rc, out, err = gp.run_command(["/nonexistent/nvidia-smi", "-L"], 5)
    assert (rc, out) == (127, "")
    assert "No such file or directory" in err
    rc, _, err = gp.run_command(["sleep", "5"], 0.2)
    assert rc == 124
    assert "timed out after 0.2s" in err
