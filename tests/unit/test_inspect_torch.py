"""Tests of compat.inspect_torch on torch trees built here, and on real wheels when present."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import pytest
from fatbin_builders import (
    PTX,
    SASS,
    VERSION_PY,
    container,
    elf,
    entry,
    torch_cuda_lib,
    write_torch,
    write_wheel,
)

from compat.fatbin import FatbinError
from compat.inspect_torch import (
    InspectError,
    InspectResult,
    arch_sort_key,
    inspect_path,
    main,
    parse_version_py,
)


def check_cuda_result(r: InspectResult) -> None:
    assert r.torch_version == "2.9.1+cu128"
    assert r.cuda == "12.8"
    assert r.variant == "cu128"
    assert not r.cpu_only
    assert r.sass == ["sm_80", "sm_86", "sm_90"]
    assert r.ptx == ["compute_90"]
    assert list(r.extras) == ["sm_50", "sm_75", "sm_90a"]
    assert r.extras["sm_75"] == ["libtorch_cuda.so (7 of 20 containers)"]
    assert r.extras["sm_90a"] == ["libtorch_cuda.so (2 of 20 containers)"]
    assert r.extras["sm_50"] == ["libcudnn_ops.so.9 (1 of 1 containers)"]
    assert "sm_52" not in r.extras  # __nv_relfatbin is ignored
    assert r.main_library == "torch/lib/libtorch_cuda.so"
    libs = {lib.name: lib for lib in r.libraries}
    assert set(libs) == {"torch/lib/libtorch_cuda.so", "torch/lib/libcudnn_ops.so.9"}
    assert libs["torch/lib/libtorch_cuda.so"].containers == 20
    assert libs["torch/lib/libtorch_cuda.so"].archs == [
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_90",
        "sm_90a",
        "compute_90",
    ]
    assert libs["torch/lib/libtorch_cuda.so"].counts["sm_86"] == 18
    assert libs["torch/lib/libtorch_cuda.so"].modal_containers == 9
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["libraries"][0]["name"].startswith("torch/lib/")


# ---------------------------------------------------------------- layouts


def test_torch_dir(tmp_path: Path) -> None:
    torch = write_torch(tmp_path)
    check_cuda_result(inspect_path(torch))


def test_site_packages(tmp_path: Path) -> None:
    write_torch(tmp_path)
    check_cuda_result(inspect_path(tmp_path))


def test_venv(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    write_torch(site)
    r = inspect_path(tmp_path / "venv")
    check_cuda_result(r)
    assert r.path == str(tmp_path / "venv")


def test_wheel_streams_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_torch(tmp_path / "src")
    wheel = write_wheel(tmp_path / "src", tmp_path / "torch-2.9.1-cp311-cp311-linux_x86_64.whl")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    check_cuda_result(inspect_path(wheel))
    assert list(scratch.iterdir()) == []


def test_single_library(tmp_path: Path) -> None:
    lib = tmp_path / "libtorch_cuda.so"
    lib.write_bytes(torch_cuda_lib())
    r = inspect_path(lib)
    assert r.torch_version is None
    assert r.variant is None
    assert r.sass == ["sm_80", "sm_86", "sm_90"]
    assert r.ptx == ["compute_90"]
    assert list(r.extras) == ["sm_75", "sm_90a"]
    assert r.main_library == "libtorch_cuda.so"


def test_single_vendor_library_is_its_own_main(tmp_path: Path) -> None:
    lib = tmp_path / "libfoo.so"
    lib.write_bytes(elf({".nv_fatbin": container(entry(SASS, 70), entry(PTX, 70))}))
    r = inspect_path(lib)
    assert r.sass == ["sm_70"]
    assert r.ptx == ["compute_70"]


def test_cpu_only(tmp_path: Path) -> None:
    write_torch(tmp_path / "src", cuda=False)
    for target in (tmp_path / "src", write_wheel(tmp_path / "src", tmp_path / "torch-cpu.whl")):
        r = inspect_path(target)
        assert r.cpu_only
        assert r.torch_version == "2.9.1+cpu"
        assert r.cuda is None
        assert r.variant == "cpu"
        assert r.sass == []
        assert r.ptx == []
        assert r.extras == {}
        assert r.libraries == []


def test_old_split_libraries_pick_the_biggest_torch_lib(tmp_path: Path) -> None:
    torch = write_torch(tmp_path, cuda=False)
    many = b"".join(container(entry(SASS, 37), entry(SASS, 70)) for _ in range(5))
    (torch / "lib" / "libtorch_cuda_cpp.so").write_bytes(
        elf({".nv_fatbin": container(entry(SASS, 61))})
    )
    (torch / "lib" / "libtorch_cuda_cu.so").write_bytes(elf({".nv_fatbin": many}))
    (torch / "lib" / "libcublasLt.so.11").write_bytes(elf({".nv_fatbin": many * 3}))
    r = inspect_path(tmp_path)
    assert r.main_library == "torch/lib/libtorch_cuda_cu.so"
    assert r.sass == ["sm_37", "sm_70"]
    assert list(r.extras) == ["sm_61"]
    assert not r.cpu_only


def test_corrupt_library_in_wheel_names_the_member(tmp_path: Path) -> None:
    torch = write_torch(tmp_path / "src", cuda=False)
    bad = container(entry(SASS, 80), size=8)
    (torch / "lib" / "libtorch_cuda.so").write_bytes(elf({".nv_fatbin": bad}))
    wheel = write_wheel(tmp_path / "src", tmp_path / "bad.whl")
    with pytest.raises(FatbinError, match=r"torch/lib/libtorch_cuda\.so: .*does not match"):
        inspect_path(wheel)


@pytest.mark.parametrize("kind", ["text", "missing", "empty_dir", "zip_without_torch"])
def test_not_a_torch_path(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "text":
        target.write_text("hello")
    elif kind == "empty_dir":
        target.mkdir()
    elif kind == "zip_without_torch":
        with zipfile.ZipFile(target, "w") as zf:
            zf.writestr("numpy/__init__.py", "")
    with pytest.raises(InspectError, match=str(target)):
        inspect_path(target)
    assert issubclass(InspectError, ValueError)


# ---------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (VERSION_PY, ("2.9.1+cu128", "12.8")),
        ("__version__ = '1.4.0'\ncuda = '10.1'\n", ("1.4.0", "10.1")),
        ("__version__ = '0.4.1'\ndebug = False\ncuda = '9.0.176'\n", ("0.4.1", "9.0.176")),
        ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n", ("2.13.0+cpu", None)),
        ("__version__ = '1.0.0'\ncuda = (\n", ("1.0.0", None)),  # syntax error: regex
        ("x = 1\n", (None, None)),
    ],
)
def test_parse_version_py(text: str, expected: tuple[str | None, str | None]) -> None:
    assert parse_version_py(text) == expected


def test_arch_sort_key() -> None:
    archs = ["compute_90", "sm_100", "sm_90a", "sm_90", "sm_37", "sm_103f", "compute_120"]
    assert sorted(archs, key=arch_sort_key) == [
        "sm_37",
        "sm_90",
        "sm_90a",
        "sm_100",
        "sm_103f",
        "compute_90",
        "compute_120",
    ]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_torch(tmp_path)
    assert main([str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sass"] == ["sm_80", "sm_86", "sm_90"]
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sm_80 sm_86 sm_90" in out
    assert "extra:  sm_75" in out
    assert main([str(tmp_path / "nope")]) == 2


# ---------------------------------------------------------------- real wheels

CPU_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
CUDA_WHEEL_DIRS = (Path("/opt/pypi/files"), Path("/opt/pypi-more/files"), Path("/opt/wheels"))


def find_cuda_wheel() -> Path | None:
    for d in CUDA_WHEEL_DIRS:
        found = sorted(d.glob("torch-2.14.1-*.whl")) if d.is_dir() else []
        if found:
            return found[0]
    return None


@pytest.mark.skipif(not CPU_WHEEL.is_file(), reason=f"{CPU_WHEEL} is not on this machine")
def test_real_cpu_wheel() -> None:
    r = inspect_path(CPU_WHEEL)
    assert r.cpu_only
    assert r.torch_version == "2.13.0+cpu"
    assert r.cuda is None
    assert r.sass == []


CUDA_WHEEL = find_cuda_wheel()


@pytest.mark.skipif(
    CUDA_WHEEL is None,
    reason="the CUDA torch 2.14.1 wheel is not in /opt/pypi/files, /opt/pypi-more/files "
    "or /opt/wheels",
)
def test_real_cuda_wheel() -> None:
    assert CUDA_WHEEL is not None
    r = inspect_path(CUDA_WHEEL)
    print(
        "measured",
        CUDA_WHEEL.name,
        json.dumps({"sass": r.sass, "ptx": r.ptx, "extras": r.extras}, indent=1),
    )
    assert r.torch_version is not None
    assert r.torch_version.split("+")[0] == "2.14.1"
    assert r.cuda is not None
    assert r.variant == "cu" + r.cuda.replace(".", "")
    assert not r.cpu_only
    assert r.main_library == "torch/lib/libtorch_cuda.so"
    assert {"sm_80", "sm_90"} <= set(r.sass)
    assert all(a.startswith("sm_") for a in r.sass)
    assert all(a.startswith("compute_") for a in r.ptx)
    assert not set(r.extras) & set(r.sass + r.ptx)
    main_lib = next(lib for lib in r.libraries if lib.name == r.main_library)
    assert main_lib.containers > 100
    # the real list is the arch set most of libtorch_cuda.so's containers carry
    assert main_lib.modal_archs == r.sass + r.ptx
    assert main_lib.modal_containers > main_lib.containers // 2
