"""A throwaway dpkg database (dpkg --admindir) for the tests of gpuprov's dpkg modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Package:
    name: str
    want: str = "install"  # dpkg's selection: install, hold, deinstall
    state: str = "installed"  # installed, half-configured, config-files, ...
    version: str = "1.0"
    arch: str = "amd64"


def make_admindir(root: Path, packages: list[Package]) -> Path:
    """``root`` as a dpkg database (status, updates/, info/) holding ``packages``."""
    for sub in ("updates", "info"):
        (root / sub).mkdir(parents=True)
    (root / "status").write_text(
        "".join(
            f"Package: {p.name}\nStatus: {p.want} ok {p.state}\nPriority: optional\n"
            "Section: misc\nMaintainer: gpuprov tests <t@x.invalid>\n"
            f"Architecture: {p.arch}\nVersion: {p.version}\n"
            "Description: a package of the throwaway database\n\n"
            for p in packages
        )
    )
    return root
