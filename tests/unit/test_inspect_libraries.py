"""Tests of compat.cudalibs (cuDNN, cuBLAS, ... in an install) and ``gpu-compat inspect``.

The libraries are ELF files built here with known fatbin entries; layouts mimic NVIDIA's
``nvidia-*`` wheels (``nvidia/<lib>/lib/*.so.N`` plus a dist-info with METADATA and RECORD)
and torch wheels that bundle the libraries in ``torch/lib``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from fatbin_builders import LTO, PTX, SASS, container, elf, entry, pad8, write_torch

from compat.cudalibs import (
    BUNDLED,
    CudaLibrary,
    LibraryError,
    cuda_library_name,
    format_libraries,
    inspect_libraries,
    library_coverage,
    main,
    weakest_link,
)


def lib_bytes(*archs: tuple[int, int]) -> bytes:
    """One library with one container per (kind, arch)."""
    blobs = [pad8(container(entry(kind, arch))) for kind, arch in archs]
    return elf({".nv_fatbin": b"".join(blobs)})


Files = dict[str, tuple[tuple[int, int], ...]]

# file -> entries: cuDNN 9 starts at sm_50 (as measured on nvidia-cudnn-cu11 9.1.0.70)
CUDNN: Files = {
    "libcudnn_ops.so.9": ((SASS, 50), (SASS, 80)),
    "libcudnn_engines_precompiled.so.9": ((SASS, 60), (SASS, 90), (PTX, 90)),
}
CUBLAS: Files = {"libcublas.so.11": ((SASS, 35),), "libcublasLt.so.11": ((SASS, 80), (PTX, 90))}


def write_nvidia(site: Path, lib: str, dist: str, version: str, files: Files) -> None:
    d = site / "nvidia" / lib / "lib"
    d.mkdir(parents=True)
    record = []
    for name, archs in files.items():
        (d / name).write_bytes(lib_bytes(*archs))
        record.append(f"nvidia/{lib}/lib/{name},sha256=x,1")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\nx\n"
    )
    (info / "RECORD").write_text("\n".join(record) + "\n")


def nvidia_wheel(path: Path, lib: str, dist: str, version: str, files: Files) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, archs in files.items():
            zf.writestr(f"nvidia/{lib}/lib/{name}", lib_bytes(*archs))
        zf.writestr(f"nvidia/{lib}/__init__.py", "")
        info = f"{dist.replace('-', '_')}-{version}.dist-info"
        zf.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        )
    return path


def by_name(libs: list[CudaLibrary]) -> dict[str, CudaLibrary]:
    return {lib.name: lib for lib in libs}


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("libcudnn_ops.so.9", "cudnn"),
        ("nvidia/cublas/lib/libcublasLt.so.12", "cublas"),
        ("libcusparseLt.so.0", "cusparselt"),
        ("libcusparse.so.12", "cusparse"),
        ("libnccl.so.2", "nccl"),
        ("torch/lib/libtorch_cuda.so", None),
        ("libcudnn.txt", None),
        ("cudnn.so", None),
    ],
)
def test_cuda_library_name(file: str, expected: str | None) -> None:
    assert cuda_library_name(file) == expected


def test_venv_with_nvidia_wheels(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    write_torch(site, cuda=True)
    write_nvidia(site, "cudnn", "nvidia-cudnn-cu11", "9.1.0.70", CUDNN)
    write_nvidia(site, "cublas", "nvidia-cublas-cu11", "11.11.3.6", CUBLAS)
    libs = inspect_libraries(tmp_path / "venv")
    assert [(lib.name, lib.package) for lib in libs] == [
        ("cublas", "nvidia-cublas-cu11"),
        ("cudnn", "nvidia-cudnn-cu11"),
        ("cudnn", BUNDLED),
    ]
    # the same from the torch package directory and from site-packages
    assert inspect_libraries(site / "torch") == libs
    assert inspect_libraries(site) == libs
    cudnn = libs[1]
    assert cudnn.version == "9.1.0.70"
    assert cudnn.sass == ["sm_50", "sm_60", "sm_80", "sm_90"]
    assert cudnn.ptx == ["compute_90"]
    assert cudnn.containers == 5
    assert cudnn.files == [
        "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9",
        "nvidia/cudnn/lib/libcudnn_ops.so.9",
    ]
    assert libs[0].sass == ["sm_35", "sm_80"]
    assert libs[0].ptx == ["compute_90"]
    d = cudnn.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["display"] == "cuDNN"


def test_coverage_and_weakest_link(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_nvidia(site, "cudnn", "nvidia-cudnn-cu11", "9.1.0.70", CUDNN)
    write_nvidia(site, "cublas", "nvidia-cublas-cu11", "11.11.3.6", CUBLAS)
    libs = inspect_libraries(site)
    k80 = library_coverage(libs, (3, 7))
    assert [(c.library.name, c.kind, c.entry) for c in k80] == [
        ("cublas", "sass", "sm_35"),
        ("cudnn", "none", None),
    ]
    weak = weakest_link(k80)
    assert weak is not None
    assert weak.library.name == "cudnn"
    assert weak.kind == "none"
    # 8.9: both through SASS; the weakest is the one whose best SASS is furthest below
    ada = library_coverage(libs, (8, 9))
    assert {c.library.name: c.entry for c in ada} == {"cublas": "sm_80", "cudnn": "sm_80"}
    # 10.0: only PTX compute_90 in both
    b200 = library_coverage(libs, (10, 0))
    assert {c.kind for c in b200} == {"ptx"}
    # 6.0: cuDNN through sm_60, cuBLAS has neither a 6.x SASS nor a PTX at or below 6.0
    p100 = weakest_link(library_coverage(libs, (6, 0)))
    assert p100 is not None
    assert p100.library.name == "cublas"
    assert p100.kind == "none"
    assert weakest_link([]) is None
    lines = format_libraries(libs, [(3, 7)])
    assert lines[0] == (
        "library cuBLAS (nvidia-cublas-cu11 11.11.3.6): sass sm_35 sm_80; ptx compute_90"
    )
    assert "sm_37: cuDNN: NO kernel image" in lines
    assert lines[-1] == "sm_37: weakest link: cuDNN (no kernel image)"


def test_kernels_a_library_loads_itself_count(tmp_path: Path) -> None:
    # Seen on an H200 (2026-12-04): nvidia-cufft 12.0.0.61 keeps one sm_75 container in
    # .nv_fatbin and the rest in .ldata; reading .nv_fatbin alone judged cuFFT "NO kernel
    # image" on sm_90 while torch.fft ran there. Here the same layout, built by the test.
    site = tmp_path / "site"
    d = site / "nvidia" / "cu13" / "lib"
    d.mkdir(parents=True)
    own = b"".join(pad8(container(entry(SASS, a))) for a in (80, 90))
    lto = pad8(container(entry(LTO, 75, header_size=128)))
    (d / "libcufft.so.12").write_bytes(
        elf({".nv_fatbin": pad8(container(entry(SASS, 75))), ".ldata": b"\x07" * 8 + own + lto})
    )
    # a library holding LTO-IR alone carries nothing a GPU runs: it is not judged
    (d / "libcurand.so.10").write_bytes(elf({".ldata": lto}))
    # CUPTI's kernels (in .rodata) serve profiling alone: listed, not judged
    (d / "libcupti.so.13").write_bytes(elf({".rodata": pad8(container(entry(SASS, 75)))}))
    libs = by_name(inspect_libraries(site))
    assert libs["cufft"].sass == ["sm_75", "sm_80", "sm_90"]
    assert libs["cufft"].ptx == []
    assert libs["curand"].sass == libs["curand"].ptx == []
    assert libs["cupti"].sass == ["sm_75"]
    h200 = library_coverage(list(libs.values()), (9, 0))
    assert [(c.library.name, c.kind, c.entry) for c in h200] == [("cufft", "sass", "sm_90")]


def test_nvidia_wheel_and_wheel_set(tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    one = nvidia_wheel(
        tmp_path / "set" / "nvidia_cudnn_cu12-9.5.1.17-py3-none-manylinux2014_x86_64.whl",
        "cudnn",
        "nvidia-cudnn-cu12",
        "9.5.1.17",
        CUDNN,
    )
    assert [(x.name, x.package, x.version) for x in inspect_libraries(one)] == [
        ("cudnn", "nvidia-cudnn-cu12", "9.5.1.17")
    ]
    nvidia_wheel(
        tmp_path / "set" / "nvidia_cublas_cu12-12.6.4.1-py3-none-manylinux2014_x86_64.whl",
        "cublas",
        "nvidia-cublas-cu12",
        "12.6.4.1",
        CUBLAS,
    )
    (tmp_path / "set" / "numpy-2.0-cp311-none-any.whl").write_bytes(b"not a zip")
    with zipfile.ZipFile(tmp_path / "set" / "six-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("six.py", "")
    libs = by_name(inspect_libraries(tmp_path / "set"))
    assert set(libs) == {"cudnn", "cublas"}
    assert libs["cublas"].version == "12.6.4.1"


def test_nothing_to_find(tmp_path: Path) -> None:
    wheel = tmp_path / "six-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("six.py", "")
    assert inspect_libraries(tmp_path) == []
    assert inspect_libraries(wheel) == []
    with pytest.raises(LibraryError, match="no such file"):
        inspect_libraries(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(LibraryError, match="not a wheel"):
        inspect_libraries(tmp_path / "notes.txt")
    bad = tmp_path / "libcudnn_ops.so.9"
    bad.write_bytes(elf({".nv_fatbin": b"\x50\xed\x55\xba" + b"\0" * 4}))
    with pytest.raises(LibraryError, match=r"libcudnn_ops\.so\.9"):
        inspect_libraries(bad)


def test_cli_cc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    write_nvidia(site, "cudnn", "nvidia-cudnn-cu11", "9.1.0.70", CUDNN)
    # cuDNN 9 has no kernel image for 3.7: exit 1, as gpu-compat inspect --gpu
    assert main([str(site), "--cc", "3.7"]) == 1
    out = capsys.readouterr().out
    assert "library cuDNN (nvidia-cudnn-cu11 9.1.0.70): sass sm_50 sm_60 sm_80 sm_90" in out
    assert "sm_37: weakest link: cuDNN (no kernel image)" in out
    assert main([str(site), "--cc", "3.7", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["coverage"] == [
        {
            "library": "cudnn",
            "display": "cuDNN",
            "package": "nvidia-cudnn-cu11",
            "version": "9.1.0.70",
            "compute_capability": "3.7",
            "result": "none",
            "covered_by": None,
        }
    ]
    assert main([str(site), "--cc", "8.0"]) == 0  # sm_80
    capsys.readouterr()
    assert main([str(site)]) == 0  # no capability asked: nothing to judge
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([str(site), "--cc", "sm_37"])


def test_gpu_compat_inspect_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpu-compat inspect PATH --gpu G`: torch's coverage and each library's, per GPU."""
    from compat.cli import main as cli

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    write_torch(site, cuda=True)
    write_nvidia(site, "cudnn", "nvidia-cudnn-cu11", "9.1.0.70", CUDNN)
    write_nvidia(site, "cublas", "nvidia-cublas-cu11", "11.11.3.6", CUBLAS)
    # A100 (8.0): torch sm_80, cuDNN sm_80, cuBLAS sm_80 -> yes
    assert cli(["inspect", str(tmp_path / "venv"), "--gpu", "A100-SXM4-40GB"]) == 0
    out = capsys.readouterr().out
    assert "A100-SXM4-40GB (8.0): torch: sass sm_80" in out
    assert "A100-SXM4-40GB (8.0): cuDNN 9.1.0.70: sass sm_80" in out
    assert "cuBLAS (nvidia-cublas-cu11 11.11.3.6): SASS sm_35 sm_80; PTX compute_90" in out
    # Tesla K80 (3.7): torch has nothing, cuDNN nothing, cuBLAS sm_35 -> no, cuDNN named
    assert cli(["inspect", str(tmp_path / "venv"), "--gpu", "K80", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    (gpu,) = d["gpus"]
    assert gpu["name"] == "Tesla K80"
    assert gpu["torch"] == {"result": "none", "covered_by": None}
    libs = {(c["library"], c["package"]): c["result"] for c in gpu["libraries"]}
    assert libs[("cudnn", "nvidia-cudnn-cu11")] == "none"
    assert libs[("cublas", "nvidia-cublas-cu11")] == "sass"
    assert gpu["weakest_link"]["library"] == "cudnn"
    # only the libraries (a site-packages without torch): the torch line is absent
    only = tmp_path / "libs"
    write_nvidia(only, "cudnn", "nvidia-cudnn-cu11", "9.1.0.70", CUDNN)
    assert cli(["inspect", str(only), "--gpu", "3.7"]) == 1
    out = capsys.readouterr().out
    assert "torch:" not in out
    assert "sm_37 (3.7): cuDNN 9.1.0.70: NO kernel image: its operations fail here" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["human", "json"])
def test_inspect_gpu_exits_1_when_only_a_library_lacks_the_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Issue 21: torch carries a kernel for the GPU, but one CUDA library does not: the
    answer is still no (exit 1), whatever else covers the GPU."""
    from compat.cli import main as cli

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    write_torch(site, cuda=True)  # torch: sm_80 sm_86 sm_90 compute_90
    # cuBLAS with Ampere SASS only: nothing for Hopper (9.0)
    write_nvidia(
        site, "cublas", "nvidia-cublas-cu12", "12.0.0.1", {"libcublas.so.12": ((SASS, 80),)}
    )
    extra = ["--json"] if as_json else []
    # A100 (8.0): torch sm_80, cuBLAS sm_80, the bundled cuDNN sm_80 -> 0
    assert cli(["inspect", str(tmp_path / "venv"), "--gpu", "A100-SXM4-40GB", *extra]) == 0
    capsys.readouterr()
    # H100 (9.0): torch sm_90, but cuBLAS (and the bundled cuDNN: sm_50 sm_80) have nothing -> 1
    assert cli(["inspect", str(tmp_path / "venv"), "--gpu", "H100", *extra]) == 1
    out = capsys.readouterr().out
    if as_json:
        d = json.loads(out)
        assert d["ok"] is False
        (gpu,) = d["gpus"]
        assert gpu["torch"] == {"result": "sass", "covered_by": "sm_90"}
        results = {c["package"]: c["result"] for c in gpu["libraries"]}
        assert results["nvidia-cublas-cu12"] == "none"
    else:
        assert "(9.0): torch: sass sm_90" in out
        assert "(9.0): cuBLAS 12.0.0.1: NO kernel image: its operations fail here" in out
    # two GPUs, one of them covered everywhere: still 1
    assert cli(["inspect", str(tmp_path / "venv"), "--gpu", "A100-SXM4-40GB", "--gpu", "H100"]) == 1
