"""gpuprov_pip_download_argv (plugins/filter/gpuprov_venv.py): the argv of jupyterlab's
background download, run here for real with this interpreter and a local index (a directory of
hand-made wheels): it downloads the whole closure into <dir>/wheels, emptied first, with a
pip of its own that it removes at the end; an environment of the same Python then installs
from it without an index; a failed download leaves no wheels; a second job while one holds
the directory's lock exits busy and changes nothing."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from gpuprov_venv import DOWNLOAD_BUSY, pip_download_argv  # plugins/filter (pythonpath)


def _wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel of one module, as pip reads it (METADATA, WHEEL, RECORD)."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
    meta += [f"Requires-Dist: {r}\n" for r in requires]
    files = {
        f"{name.replace('-', '_')}.py": f"VERSION = {version!r}\n",
        f"{dist}.dist-info/METADATA": "".join(meta),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(index / f"{dist}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{dist}.dist-info/RECORD", record)


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )


@pytest.fixture
def index(tmp_path: Path) -> Path:
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "gpuprov-demo", "1.0", ("gpuprov-dep>=2",))
    _wheel(index, "gpuprov-dep", "2.1")
    _wheel(index, "gpuprov-dep", "1.0")  # too old for the demo: not downloaded
    _wheel(index, "gpuprov-other", "1.0")  # not asked for: not downloaded
    return index


def test_the_job_downloads_the_closure_an_environment_installs_from_without_an_index(
    tmp_path: Path, index: Path
) -> None:
    top = tmp_path / "cache" / "jupyterlab"  # missing parents too
    local = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}  # the job's "index"
    first = _run(pip_download_argv(str(top), sys.executable, ["gpuprov-demo==1.0"]), **local)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in (top / "wheels").iterdir()) == [
        "gpuprov_demo-1.0-py3-none-any.whl",
        "gpuprov_dep-2.1-py3-none-any.whl",
    ]
    assert stat.S_IMODE(top.stat().st_mode) == 0o700  # root's alone on the host
    # Its own pip (Debian's python3 has none), gone at the end: a later job makes it again
    # from the interpreter it is given then (pytorch_python may change between runs).
    assert sorted(p.name for p in top.iterdir()) == ["lock", "wheels"]
    # The install phase's use: an environment of the same Python, no index, the wheels only.
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    wheels = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(top / "wheels")}
    installed = _run([str(env / "bin" / "pip"), "install", "gpuprov-demo==1.0"], **wheels)
    assert installed.returncode == 0, installed.stderr
    check = "import gpuprov_demo, gpuprov_dep; print(gpuprov_demo.VERSION, gpuprov_dep.VERSION)"
    ran = _run([str(env / "bin" / "python"), "-c", check])
    assert ran.stdout.split() == ["1.0", "2.1"], ran.stderr
    # A second job empties wheels/ first: nothing of an earlier download is left to install
    # from. A scratch pip that a killed job left (no bin/pip) is made afresh.
    (top / "wheels" / "stale-0.1-py3-none-any.whl").write_text("")
    (top / "pip" / "bin").mkdir(parents=True)
    top.chmod(0o755)
    second = _run(pip_download_argv(str(top), sys.executable, ["gpuprov-other==1.0"]), **local)
    assert second.returncode == 0, second.stderr
    assert [p.name for p in (top / "wheels").iterdir()] == ["gpuprov_other-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in top.iterdir()) == ["lock", "wheels"]
    assert stat.S_IMODE(top.stat().st_mode) == 0o700
    # pip's own failure is the job's, and it leaves no wheels (nor its pip) behind.
    missing = _run(pip_download_argv(str(top), sys.executable, ["gpuprov-nowhere==1"]), **local)
    assert missing.returncode == 1, missing.stderr
    assert "gpuprov-nowhere" in missing.stderr
    assert [p.name for p in top.iterdir()] == ["lock"]


def test_a_second_job_while_the_directory_is_held_exits_busy_and_touches_nothing(
    tmp_path: Path, index: Path
) -> None:
    top = tmp_path / "jupyterlab"
    (top / "wheels").mkdir(parents=True)
    (top / "wheels" / "kept-1.0-py3-none-any.whl").write_text("")
    top.chmod(0o755)  # not even its mode is changed
    with (top / "lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an interrupted run's job, still going
        local = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}
        busy = _run(pip_download_argv(str(top), sys.executable, ["gpuprov-demo==1.0"]), **local)
    assert busy.returncode == DOWNLOAD_BUSY, busy.stderr
    assert [p.name for p in (top / "wheels").iterdir()] == ["kept-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in top.iterdir()) == ["lock", "wheels"]
    assert stat.S_IMODE(top.stat().st_mode) == 0o755
