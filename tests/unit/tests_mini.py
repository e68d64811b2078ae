"""The synthetic matrix of the unit tests (conftest.py's ``mini`` fixture) and helpers that
extend it, importable by name (tests/unit is on sys.path): no loading of conftest.py by path."""

from __future__ import annotations

from typing import Any

from compat.data import Matrix


def _src(x: str) -> str:
    return f"synthetic test row ({x})"


def mini_tables() -> dict[str, list[dict[str, Any]]]:
    """A made-up matrix: two architectures, three toolkits, three torch releases."""
    return {
        "architectures": [
            {
                "name": "kepler",
                "compute_capabilities": ["3.5", "3.7"],
                "min_driver_branch": 300,
                "last_driver_branch": 470,
                "source": _src("kepler"),
            },
            {
                "name": "maxwell",
                "compute_capabilities": ["5.0", "5.2"],
                "min_driver_branch": 340,
                "last_driver_branch": 580,
                "source": _src("maxwell"),
            },
            {
                "name": "ampere",
                "compute_capabilities": ["8.0", "8.6"],
                "min_driver_branch": 450,
                "last_driver_branch": None,
                "source": _src("ampere"),
            },
        ],
        "gpus": [
            {
                "name": "Tesla K40m",
                "aliases": ["K40m"],
                "pci_ids": ["10de:1023"],
                "compute_capability": "3.5",
                "architecture": "kepler",
                "source": _src("k40m"),
            },
            {
                "name": "Tesla M40",
                "aliases": ["M40"],
                "pci_ids": ["10de:17fd"],
                "compute_capability": "5.2",
                "architecture": "maxwell",
                "source": _src("m40"),
            },
            {
                "name": "A100-SXM4-40GB",
                "aliases": ["A100"],
                "pci_ids": ["10de:20b0"],
                "compute_capability": "8.0",
                "architecture": "ampere",
                "source": _src("a100"),
            },
            {
                "name": "GeForce RTX 3090",
                "aliases": ["RTX 3090"],
                "pci_ids": ["10de:2204"],
                "compute_capability": "8.6",
                "architecture": "ampere",
                "min_driver_branch": 455,
                "source": _src("3090"),
            },
        ],
        "branches": [
            {"branch": 450, "max_cuda": "11.0", "source": _src("450")},
            {"branch": 470, "max_cuda": "11.4", "source": _src("470")},
            {"branch": 535, "max_cuda": "12.2", "source": _src("535")},
        ],
        "toolkits": [
            {
                "version": "10.2",
                "min_driver": "440.33",
                "minor_compat_driver": None,
                "min_compute_capability": "3.0",
                "max_compute_capability": "7.5",
                "source": _src("10.2"),
            },
            {
                "version": "11.0",
                "min_driver": "450.36.06",
                "minor_compat_driver": "450.80.02",
                "min_compute_capability": "3.5",
                "max_compute_capability": "8.0",
                "source": _src("11.0"),
            },
            {
                "version": "11.8",
                "min_driver": "520.61.05",
                "minor_compat_driver": "450.80.02",
                "min_compute_capability": "3.5",
                "max_compute_capability": "9.0",
                "source": _src("11.8"),
            },
        ],
        "releases": [
            {
                "version": "1.5.0",
                "python": ["3.7"],
                "torchvision": "0.6.0",
                "torchaudio": None,
                "pypi_default": "cu102",
                "pip_style": "find_links",
                "conda_style": "cudatoolkit",
                "source": _src("1.5.0"),
                "variants": [
                    {
                        "name": "cu102",
                        "cuda": "10.2",
                        "channels": ["pip", "conda"],
                        "sass": ["sm_35", "sm_50", "sm_60"],
                        "ptx": [],
                        "conda": {"sass": ["sm_35", "sm_50", "sm_60"], "ptx": ["compute_60"]},
                        "source": _src("1.5.0 cu102"),
                    },
                    {
                        "name": "cpu",
                        "cuda": None,
                        "channels": ["pip", "conda"],
                        "source": _src("1.5.0 cpu"),
                    },
                ],
            },
            {
                "version": "1.9.0",
                "python": ["3.8", "3.9"],
                "torchvision": "0.10.0",
                "torchaudio": "0.9.0",
                "pypi_default": "cu102",
                "pip_style": "index",
                "conda_style": None,
                "source": _src("1.9.0"),
                "variants": [
                    {
                        "name": "cu102",
                        "cuda": "10.2",
                        "channels": ["pip"],
                        "sass": ["sm_50", "sm_60"],
                        "ptx": ["compute_50"],
                        "source": _src("a"),
                    },
                    {
                        "name": "cu110",
                        "cuda": "11.0",
                        "channels": ["pip"],
                        "sass": ["sm_50", "sm_80"],
                        "ptx": [],
                        "source": _src("b"),
                    },
                ],
            },
            {
                "version": "2.0.0",
                "python": ["3.8", "3.9", "3.10"],
                "torchvision": "0.15.0",
                "torchaudio": "2.0.0",
                "pypi_default": "cu118",
                "pip_style": "index",
                "conda_style": "pytorch-cuda",
                "source": _src("2.0.0"),
                "variants": [
                    {
                        "name": "cu118",
                        "cuda": "11.8",
                        "channels": ["pip"],
                        "sass": ["sm_80"],
                        "ptx": ["compute_50"],
                        "source": _src("c"),
                    },
                    {"name": "cpu", "cuda": None, "channels": ["pip"], "source": _src("d")},
                ],
            },
        ],
        "containers": [],
        "errors": [
            {
                "id": "no-kernel-image",
                "patterns": ["no kernel image is available"],
                "title": "No kernel image",
                "cause": "c",
                "checks": ["x"],
                "fixes": ["y"],
                "source": _src("err"),
            },
        ],
        "floors": [],
        "debian": [],
    }


def with_containers(containers: list[dict[str, Any]]) -> Matrix:
    tables = mini_tables()
    tables["containers"] = containers
    return Matrix(tables)


def with_libraries(
    libraries: list[dict[str, Any]], pins: list[dict[str, Any]], **changes: Any
) -> Matrix:
    """The synthetic matrix plus measured library rows and pins; ``changes`` edit variants:
    ``{"2.0.0 cu118": {"confidence": "unverified"}}`` style via the key ``variants``."""
    tables = mini_tables()
    tables["libraries"] = libraries
    tables["pins"] = pins
    for key, edit in changes.get("variants", {}).items():
        version, name = key.split()
        for rel in tables["releases"]:
            for v in rel["variants"]:
                if rel["version"] == version and v["name"] == name:
                    v.update(edit)
    for rel in changes.get("releases", []):
        tables["releases"].append(rel)
    return Matrix(tables)
