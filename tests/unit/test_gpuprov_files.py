"""gpuprov_files (plugins/modules and plugins/action): many of gpuprov's own files in one
module call. Real files in a temporary directory; only the owner is the test's own."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import gpuprov_files  # plugins/modules/gpuprov_files.py
import gpuprov_files_action as action  # plugins/action/gpuprov_files.py (tests/unit/conftest.py)
import pytest
import yaml
from ansible.errors import AnsibleActionFail

ROOT = Path(__file__).resolve().parents[2]
UID, GID = os.getuid(), os.getgid()


def want(path: Path, text: str, mode: int = 0o644) -> gpuprov_files.Wanted:
    return gpuprov_files.Wanted(dest=str(path), content=text.encode(), mode=mode)


def test_writes_missing_files_and_leaves_equal_ones(tmp_path: Path) -> None:
    same = tmp_path / "same.py"
    same.write_text("print(1)\n")
    same.chmod(0o644)
    before = same.stat().st_mtime_ns
    wanted = [want(tmp_path / "new.py", "print(2)\n", 0o755), want(same, "print(1)\n")]
    changed = gpuprov_files.converge(wanted, UID, GID, check_mode=False)
    assert changed == [str(tmp_path / "new.py")]
    assert (tmp_path / "new.py").read_text() == "print(2)\n"
    assert stat.S_IMODE((tmp_path / "new.py").stat().st_mode) == 0o755
    assert same.stat().st_mtime_ns == before  # not rewritten
    assert gpuprov_files.converge(wanted, UID, GID, check_mode=False) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.py", "same.py"]  # no temp left


@pytest.mark.parametrize("drift", ["content", "mode", "symlink"])
def test_drift_is_repaired(tmp_path: Path, drift: str) -> None:
    dest = tmp_path / "s.py"
    dest.write_text("good\n")
    dest.chmod(0o755)
    if drift == "content":
        dest.write_text("edited by hand\n")
    elif drift == "mode":
        dest.chmod(0o600)
    else:
        dest.unlink()
        (tmp_path / "elsewhere").write_text("good\n")
        dest.symlink_to(tmp_path / "elsewhere")
    assert gpuprov_files.converge([want(dest, "good\n", 0o755)], UID, GID, False) == [str(dest)]
    assert dest.read_text() == "good\n"
    assert not dest.is_symlink()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755


def test_check_mode_reports_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("old\n")
    wanted = [want(tmp_path / "a", "new\n"), want(tmp_path / "b", "x\n")]
    changed = gpuprov_files.converge(wanted, UID, GID, check_mode=True)
    assert changed == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert (tmp_path / "a").read_text() == "old\n"
    assert not (tmp_path / "b").exists()


def test_parse_names_each_bad_entry() -> None:
    good = {"dest": "/opt/x", "content": base64.b64encode(b"hi").decode(), "mode": "0755"}
    wanted, problems = gpuprov_files.parse(
        [good, {"dest": "rel/x", "content": ""}, {"dest": "/opt/y", "content": "%%%"}]
    )
    assert wanted == [gpuprov_files.Wanted("/opt/x", b"hi", 0o755)]
    assert problems[0] == "dest 'rel/x' is not an absolute path"
    assert problems[1].startswith("/opt/y: ")
    assert len(problems) == 2


def test_action_reads_the_controller_files_as_bytes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_bytes(b"x = 1\n\n")  # trailing newlines kept
    specs = action.file_specs(str(tmp_path), ["sub/m.py"], "/opt/s", "0755")
    assert specs == [
        {
            "dest": "/opt/s/sub/m.py",
            "content": base64.b64encode(b"x = 1\n\n").decode(),
            "mode": "0755",
        }
    ]
    with pytest.raises(AnsibleActionFail, match=r"cannot read .*/nope\.py"):
        action.file_specs(str(tmp_path), ["nope.py"], "/opt/s", "0644")


def test_no_role_copies_its_own_files_in_a_loop() -> None:
    """A looped copy of gpuprov's files costs one module run per file on every run: such
    copies go through gpuprov_files (one call). Fails if a looped copy of a src comes back."""
    looped = []
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            copy = task.get("ansible.builtin.copy") or {}
            ours = "src" in copy and not copy.get("remote_src")  # a host-side copy is not
            if ours and ("loop" in task or "with_items" in task):
                looped.append(f"{path.relative_to(ROOT)}: {task['name']}")
    assert looped == []
