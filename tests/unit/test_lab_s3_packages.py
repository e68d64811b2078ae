"""The lab's moto packages (scripts/gpuprov_lab/s3lab.py): installed once per machine, into a
directory renamed into place when pip is done. pip itself is replaced here by a function that
writes what `pip install --target DIR` would (or fails like it): the network and PyPI are not
what these tests judge; the lab tests run the real install whenever the cache is empty."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpuprov_lab import s3lab


class FakePip:
    def __init__(self, fail: bool = False, before: Path | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.before = before  # a directory another lab completes while this pip runs

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append(argv)
        target = Path(argv[argv.index("--target") + 1])
        (target / "moto").mkdir()
        (target / "moto" / "__init__.py").write_text("")
        if self.before is not None:
            (self.before / "moto").mkdir(parents=True)
        if self.fail:
            raise subprocess.CalledProcessError(1, argv, b"", b"ERROR: no network")
        return subprocess.CompletedProcess(argv, 0, b"", b"")


def test_the_cache_is_per_machine_version_and_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    where = s3lab.package_cache()
    assert where.parent == tmp_path / "gpuprov" / "lab"
    assert where.name.startswith(f"moto-{s3lab.MOTO_VERSION}-cpython-")


def test_installed_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pip = FakePip()
    monkeypatch.setattr(s3lab.subprocess, "run", pip)
    target = tmp_path / "lab" / "moto-x"
    assert s3lab.ensure_packages(target) == target.resolve()
    assert (target / "moto" / "__init__.py").is_file()
    assert target.stat().st_mode & 0o755 == 0o755  # the container's user reads it
    assert s3lab.ensure_packages(target) == target.resolve()
    assert len(pip.calls) == 1
    assert f"moto[server]=={s3lab.MOTO_VERSION}" in pip.calls[0]
    assert sorted(p.name for p in target.parent.iterdir()) == ["moto-x"]


def test_a_failed_install_leaves_nothing_half_filled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3lab.subprocess, "run", FakePip(fail=True))
    target = tmp_path / "lab" / "moto-x"
    with pytest.raises(subprocess.CalledProcessError):
        s3lab.ensure_packages(target)
    assert list(target.parent.iterdir()) == []


def test_another_labs_install_that_finished_first_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "lab" / "moto-x"
    monkeypatch.setattr(s3lab.subprocess, "run", FakePip(before=target))
    assert s3lab.ensure_packages(target) == target.resolve()
    assert sorted(p.name for p in target.parent.iterdir()) == ["moto-x"]
    assert not (target / "moto" / "__init__.py").exists()  # theirs, not ours
