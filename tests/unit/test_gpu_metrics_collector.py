"""The textfile collector (roles/gpu_monitoring/files/gpuprov_gpu_metrics.py) with a driver, in
this process.

No GPU here: `nvidia-smi` and `journalctl` are stand-ins on PATH that check the arguments the
collector gives them and print what the real tools print for them: CSV rows in the format
`nvidia-smi --query-gpu=... --format=csv,noheader,nounits` writes (an A100 on R550; a K40m on
R470 whose board reports "[N/A]"/"[Not Supported]"), and the kernel's `NVRM: Xid` lines. The
driver's /proc/driver/nvidia/version and torch's version.py are files in their real formats.
The no-driver run (a real process, as on the lab's hosts) is in tests/unit/test_gpu_monitoring.py.
"""

from __future__ import annotations

from pathlib import Path

import gpuprov_gpu_metrics as col  # roles/gpu_monitoring/files/gpuprov_gpu_metrics.py
import pytest

QUERY = (
    "index,uuid,name,pci.bus_id,driver_version,utilization.gpu,utilization.memory,memory.total,"
    "memory.used,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,"
    "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total"
)
A100 = (
    "0, GPU-3f1b6f0e-5b2e-7c1a-9d0e-2f4a6b8c0d1e, NVIDIA A100-SXM4-40GB, 00000000:07:00.0, "
    "550.54.15, 87, 40, 40960, 1024, 61, 250.50, 400.00, 1410, 1215, 0, 2"
)
A100_2 = (
    "1, GPU-8c2d4e6f-0a1b-2c3d-4e5f-6a7b8c9d0e1f, NVIDIA A100-SXM4-40GB, 00000000:0F:00.0, "
    "550.54.15, 0, 0, 40960, 4, 34, 54.43, 400.00, 210, 1215, 0, 0"
)
XID_LOG = (
    "NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    "NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    "NVRM: Xid (PCI:0000:0f:00): 13, pid=2201, name=python, Graphics SM Warp Exception on "
    "(GPC 0, TPC 0, SM 0): Out Of Range Address\n"
)
# The stand-ins: exit 64 (usage) on any other arguments, so a changed command fails here.
FAKE_SMI = f"""#!/bin/sh
[ "$#" = 2 ] && [ "$1" = "--query-gpu={QUERY}" ] && [ "$2" = "--format=csv,noheader,nounits" ] \\
  || {{ echo "unexpected arguments: $*" >&2; exit 64; }}
eval "$FAKE_SMI"
"""
FAKE_JOURNALCTL = """#!/bin/sh
[ "$*" = "-k -b -o cat --no-pager -g NVRM: Xid" ] || { echo "unexpected: $*" >&2; exit 64; }
printf '%s' "$FAKE_XID"
"""
# /proc/driver/nvidia/version of the proprietary and of the open kernel module (R550).
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
# torch/version.py as the wheels write it: 2.x annotates, 1.x does not; a CPU build: None.
TORCH_2 = (
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
    "__version__ = '2.5.1+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\n"
    "git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip: Optional[str] = None\n"
)
TORCH_1 = (
    "__version__ = '1.12.1+cu113'\ndebug = False\ncuda = '11.3'\n"
    "git_version = '664058fa83f1d8eede5d66418abff6e20bd76ca8'\nhip = None\n"
)
TORCH_CPU = (
    "from typing import Optional\n\n__version__ = '2.13.0+cpu'\ndebug = False\n"
    "cuda: Optional[str] = None\ngit_version = 'x'\nhip: Optional[str] = None\n"
)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """nvidia-smi and journalctl stand-ins first on PATH; no driver version file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("journalctl", FAKE_JOURNALCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_SMI", f"printf '%s\\n' '{A100}' '{A100_2}'")
    monkeypatch.setenv("FAKE_XID", XID_LOG)
    monkeypatch.setattr(col, "driver_version", lambda: None)  # this machine's, if it has one
    (tmp_path / "sys").mkdir()
    return tmp_path


def collect(host: Path, *extra: str) -> str:
    out = host / "textfile"
    out.mkdir(exist_ok=True)
    argv = ["--out", str(out), "--facts", str(host / "none.json"), "--venv", str(host / "venv")]
    assert col.main([*argv, "--sysfs-root", str(host / "sys"), *extra]) == 0
    return (out / "gpuprov.prom").read_text()


def samples(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith((f"{name} ", f"{name}{{"))]


def test_the_query_is_the_one_the_stand_in_checks() -> None:
    assert ",".join(col.QUERY_FIELDS) == QUERY


def test_a_host_with_a_driver_gets_every_gpu_its_errors_and_its_driver(host: Path) -> None:
    text = collect(host)
    assert samples(text, "gpuprov_gpu_driver_loaded") == ["gpuprov_gpu_driver_loaded 1"]
    assert samples(text, "gpuprov_gpu_smi_up") == ["gpuprov_gpu_smi_up 1"]
    first = (
        'gpu="0",uuid="GPU-3f1b6f0e-5b2e-7c1a-9d0e-2f4a6b8c0d1e",name="NVIDIA A100-SXM4-40GB",'
        'bus_id="0000:07:00.0"'
    )
    assert samples(text, "gpuprov_gpu_info")[0] == (
        f'gpuprov_gpu_info{{{first},driver="550.54.15"}} 1'
    )
    assert len(samples(text, "gpuprov_gpu_info")) == 2
    assert f"gpuprov_gpu_memory_total_bytes{{{first}}} 42949672960" in text  # 40960 MiB
    assert f"gpuprov_gpu_power_draw_watts{{{first}}} 250.5" in text
    assert f"gpuprov_gpu_memory_clock_hertz{{{first}}} 1215000000" in text
    assert f"gpuprov_gpu_ecc_uncorrected_errors{{{first}}} 2" in text
    assert samples(text, "gpuprov_gpu_xid_errors") == [
        'gpuprov_gpu_xid_errors{bus_id="0000:07:00",xid="79"} 2',
        'gpuprov_gpu_xid_errors{bus_id="0000:0f:00",xid="13"} 1',
    ]
    # The installed driver is the one nvidia-smi reports when /proc has none.
    assert 'gpuprov_installed_info{driver="550.54.15",cuda="",torch=""} 1' in text
    assert samples(text, "gpuprov_smoke_report_present") == ["gpuprov_smoke_report_present 0"]
    assert text.endswith("\n")
    assert [p.name for p in (host / "textfile").iterdir()] == ["gpuprov.prom"]


def test_a_gpu_without_power_or_ecc_readings_has_no_such_samples(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k40m = (
        "0, GPU-d2c1b0a9-8f7e-6d5c-4b3a-291807f6e5d4, Tesla K40m, 00000000:86:00.0, "
        "470.256.02, 3, 0, 11441, 0, 34, [N/A], [Not Supported], 324, 324, [N/A], [N/A]"
    )
    monkeypatch.setenv("FAKE_SMI", f"echo '{k40m}'")
    monkeypatch.setenv("FAKE_XID", "")
    text = collect(host)
    ident = (
        'gpu="0",uuid="GPU-d2c1b0a9-8f7e-6d5c-4b3a-291807f6e5d4",name="Tesla K40m",'
        'bus_id="0000:86:00.0"'
    )
    assert f"gpuprov_gpu_temperature_celsius{{{ident}}} 34" in text
    for absent in (
        "gpuprov_gpu_power_draw_watts",
        "gpuprov_gpu_power_limit_watts",
        "gpuprov_gpu_ecc_corrected_errors",
        "gpuprov_gpu_ecc_uncorrected_errors",
        "gpuprov_gpu_xid_errors",
    ):
        assert samples(text, absent) == [], absent


@pytest.mark.parametrize(
    ("smi", "extra"),
    [
        (
            "echo 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate with the NVIDIA "
            "driver. Make sure that the latest NVIDIA driver is installed and running.'; exit 9",
            (),
        ),
        ("exec sleep 5", ("--smi-timeout", "0.3")),
    ],
    ids=["no-driver", "hangs"],
)
def test_an_nvidia_smi_that_fails_or_hangs_reads_as_no_driver(
    host: Path, monkeypatch: pytest.MonkeyPatch, smi: str, extra: tuple[str, ...]
) -> None:
    monkeypatch.setenv("FAKE_SMI", smi)
    text = collect(host, *extra)
    assert samples(text, "gpuprov_gpu_driver_loaded") == ["gpuprov_gpu_driver_loaded 0"]
    assert samples(text, "gpuprov_gpu_smi_up") == ["gpuprov_gpu_smi_up 0"]
    assert samples(text, "gpuprov_gpu_info") == []
    assert samples(text, "gpuprov_gpu_xid_errors") == []  # no driver: the log is not read


def test_stdout_prints_and_writes_nothing(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = host / "textfile"
    args = ["--out", str(out), "--venv", str(host / "venv"), "--sysfs-root", str(host / "sys")]
    assert col.main([*args, "--facts", "", "--stdout"]) == 0
    assert "\ngpuprov_gpu_smi_up 1\n" in capsys.readouterr().out
    assert not out.exists()


def test_an_unwritable_directory_fails_naming_it(
    host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = host / "no-such-dir"
    args = ["--out", str(missing), "--venv", str(host / "venv"), "--sysfs-root", str(host / "sys")]
    assert col.main(args) == 1
    assert capsys.readouterr().err.startswith(
        f"gpuprov_gpu_metrics: cannot write {missing}/gpuprov.prom: [Errno 2] No such file"
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [(PROPRIETARY, "550.54.15"), (OPEN, "550.54.15"), ("garbage\n", None)],
    ids=["proprietary", "open", "unreadable"],
)
def test_driver_version_from_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, version: str | None
) -> None:
    proc = tmp_path / "version"
    proc.write_text(text)
    real = col.Path

    def path(*parts: str) -> Path:
        where = str(real(*parts))
        return proc if where == "/proc/driver/nvidia/version" else real(where)

    monkeypatch.setattr(col, "Path", path)
    assert col.driver_version() == version
    proc.unlink()
    assert col.driver_version() is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (TORCH_2, {"torch": "2.5.1+cu121", "cuda": "12.1"}),
        (TORCH_1, {"torch": "1.12.1+cu113", "cuda": "11.3"}),
        (TORCH_CPU, {"torch": "2.13.0+cpu", "cuda": None}),
    ],
    ids=["torch-2", "torch-1", "cpu-build"],
)
def test_torch_installed_reads_version_py(
    tmp_path: Path, text: str, want: dict[str, str | None]
) -> None:
    assert col.torch_installed(str(tmp_path)) == {"torch": None, "cuda": None}
    site = tmp_path / "lib" / "python3.11" / "site-packages" / "torch"
    site.mkdir(parents=True)
    (site / "version.py").write_text(text)
    assert col.torch_installed(str(tmp_path)) == want
