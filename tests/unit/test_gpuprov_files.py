"""gpuprov_files (plugins/modules and plugins/action): many of gpuprov's own files and
directories in one module call. Real files in a temporary directory; only the owner is the
test's own."""

from __future__ import annotations

import base64
import grp
import json
import os
import pwd
import stat
import textwrap
from pathlib import Path

import gpuprov_files  # plugins/modules/gpuprov_files.py
import gpuprov_files_action as action  # plugins/action/gpuprov_files.py (tests/unit/conftest.py)
import pytest
import yaml
from ansible.errors import AnsibleActionFail
from local_play import run_local_play

ROOT = Path(__file__).resolve().parents[2]
UID, GID = os.getuid(), os.getgid()
USER, GROUP = pwd.getpwuid(UID).pw_name, grp.getgrgid(GID).gr_name


def want(path: Path, text: str, mode: int = 0o644, diff: bool = True) -> gpuprov_files.Wanted:
    return gpuprov_files.Wanted(str(path), text.encode(), mode, USER, GROUP, diff)


def wdir(path: Path, mode: int = 0o750) -> gpuprov_files.WantedDir:
    return gpuprov_files.WantedDir(str(path), mode, USER, GROUP)


def converge(
    files: list[gpuprov_files.Wanted],
    check: bool = False,
    dirs: list[gpuprov_files.WantedDir] | None = None,
) -> list[str]:
    return gpuprov_files.run(files, dirs or [], check, diff=False)[0]


def test_writes_missing_files_and_leaves_equal_ones(tmp_path: Path) -> None:
    same = tmp_path / "same.py"
    same.write_text("print(1)\n")
    same.chmod(0o644)
    before = same.stat().st_mtime_ns
    wanted = [want(tmp_path / "new.py", "print(2)\n", 0o755), want(same, "print(1)\n")]
    assert converge(wanted) == [str(tmp_path / "new.py")]
    assert (tmp_path / "new.py").read_text() == "print(2)\n"
    assert stat.S_IMODE((tmp_path / "new.py").stat().st_mode) == 0o755
    assert same.stat().st_mtime_ns == before  # not rewritten
    assert converge(wanted) == []
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
    assert converge([want(dest, "good\n", 0o755)]) == [str(dest)]
    assert dest.read_text() == "good\n"
    assert not dest.is_symlink()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755


def test_check_mode_reports_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("old\n")
    wanted = [want(tmp_path / "a", "new\n"), want(tmp_path / "d" / "b", "x\n")]
    changed = converge(wanted, check=True, dirs=[wdir(tmp_path / "d")])
    assert changed == [str(tmp_path / "d"), str(tmp_path / "a"), str(tmp_path / "d" / "b")]
    assert (tmp_path / "a").read_text() == "old\n"
    assert not (tmp_path / "d").exists()


def test_directories_come_first_and_are_fixed(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o750)
    kept.chmod(0o750)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    tmp_path.chmod(0o711)  # an existing parent: left alone
    new = tmp_path / "p" / "new"  # its parent is created too, as the file module does
    # a file in the new parent (Triton's config.pbtxt beside its model's version directory)
    files = [want(new / "f", "x\n"), want(new.parent / "g", "y\n")]
    dirs = [wdir(kept), wdir(loose), wdir(new, 0o700)]
    assert converge(files, dirs=dirs) == [
        str(loose),
        str(new),
        str(new / "f"),
        str(new.parent / "g"),
    ]
    assert stat.S_IMODE(loose.stat().st_mode) == 0o750
    assert stat.S_IMODE(new.stat().st_mode) == 0o700
    assert stat.S_IMODE(new.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o711
    assert converge(files, dirs=dirs) == []


def test_a_file_where_a_directory_belongs_stops_the_call(tmp_path: Path) -> None:
    (tmp_path / "d").write_text("")
    with pytest.raises(NotADirectoryError) as ours:
        converge([], dirs=[wdir(tmp_path / "d")])
    assert ours.value.errno is None  # main() says the path is no directory
    with pytest.raises(NotADirectoryError) as the_os:  # a component is a file (under --check)
        converge([want(tmp_path / "d" / "f", "x\n")], check=True)
    assert the_os.value.errno is not None


def test_a_failed_write_names_the_destination_and_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()  # a directory where the file goes
    (tmp_path / "dest").chmod(0o755)
    with pytest.raises(OSError, match="Is a directory") as failed:
        gpuprov_files.write(want(tmp_path / "dest", "x\n"), UID, GID)
    assert failed.value.filename == str(tmp_path / "dest")
    assert [p.name for p in tmp_path.iterdir()] == ["dest"]


def test_unknown_owner_or_missing_directory_changes_nothing(tmp_path: Path) -> None:
    first = want(tmp_path / "first", "x\n")
    nobody = gpuprov_files.Wanted(
        str(tmp_path / "second"), b"y", 0o644, "gpuprov-no-such-user", GROUP
    )
    with pytest.raises(KeyError, match="gpuprov-no-such-user"):
        converge([first, nobody])
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "absent")):
        converge([first, want(tmp_path / "absent" / "f", "y\n")])
    assert list(tmp_path.iterdir()) == []
    # --check on a fresh host: the role creates its user before it writes the files
    (tmp_path / "second").write_bytes(b"y")
    (tmp_path / "second").chmod(0o644)
    d = gpuprov_files.WantedDir(str(tmp_path / "d"), 0o750, USER, "gpuprov-no-such-group")
    assert converge([nobody], check=True, dirs=[d]) == [
        str(tmp_path / "d"),
        str(tmp_path / "second"),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["second"]


def test_diff_shows_text_and_attributes_unless_told_not_to(tmp_path: Path) -> None:
    (tmp_path / "conf").write_text("a = 1\n")
    (tmp_path / "conf").chmod(0o644)
    (tmp_path / "script").write_text("old\n")
    (tmp_path / "script").chmod(0o600)
    (tmp_path / "blob").write_bytes(b"\xff\xff")
    (tmp_path / "blob").chmod(0o644)
    (tmp_path / "e").mkdir()
    (tmp_path / "e").chmod(0o755)
    files = [
        want(tmp_path / "conf", "a = 2\n"),
        want(tmp_path / "script", "new\n", 0o755, diff=False),
        gpuprov_files.Wanted(str(tmp_path / "blob"), b"\xff\xfe", 0o644, USER, GROUP),
        want(tmp_path / "fresh", "b = 1\n", 0o600),  # new: its text, not its attributes
    ]
    dirs = [wdir(tmp_path / "d"), wdir(tmp_path / "e")]
    changed, diffs = gpuprov_files.run(files, dirs, True, diff=True)
    assert len(changed) == 6  # the blob changed too: binary, so no text
    attrs = f"owner {USER}, group {GROUP}\n"
    assert diffs == [
        {"before_header": str(tmp_path / "d"), "after_header": str(tmp_path / "d"),
         "before": "absent\n", "after": f"directory, mode 0750, {attrs}"},
        {"before_header": str(tmp_path / "e"), "after_header": str(tmp_path / "e"),
         "before": f"directory, mode 0755, {attrs}", "after": f"directory, mode 0750, {attrs}"},
        {"before_header": str(tmp_path / "conf"), "after_header": str(tmp_path / "conf"),
         "before": "a = 1\n", "after": "a = 2\n"},
        {"before_header": f"{tmp_path / 'script'} (attributes)",
         "after_header": f"{tmp_path / 'script'} (attributes)",
         "before": f"mode 0600, {attrs}", "after": f"mode 0755, {attrs}"},
        {"before_header": str(tmp_path / "fresh"), "after_header": str(tmp_path / "fresh"),
         "before": "", "after": "b = 1\n"},
    ]  # fmt: skip


def test_parse_names_each_bad_entry() -> None:
    good = {"dest": "/opt/x", "content": base64.b64encode(b"hi").decode(), "mode": "0755"}
    mine = {**good, "dest": "/opt/z", "owner": "svc", "diff": False}
    wanted, problems = gpuprov_files.parse(
        [
            good,
            mine,
            {"dest": "rel/x", "content": ""},
            {"dest": "/opt/y", "content": "%%%", "mode": "0644"},
        ],
        owner="root",
        group="wheel",
    )
    assert wanted == [
        gpuprov_files.Wanted("/opt/x", b"hi", 0o755, "root", "wheel", True),
        gpuprov_files.Wanted("/opt/z", b"hi", 0o755, "svc", "wheel", False),
    ]
    assert problems[0] == "dest 'rel/x' is not an absolute path"
    assert problems[1].startswith("/opt/y: ")
    assert len(problems) == 2
    dirs, problems = gpuprov_files.parse_dirs(
        [
            {"path": "/etc/a", "mode": "0750", "group": "g"},
            {"path": "b", "mode": "0755"},
            {"path": "/c"},
        ]
    )
    assert dirs == [gpuprov_files.WantedDir("/etc/a", 0o750, "root", "g")]
    assert problems == ["path 'b' is not an absolute path", "/c: mode None is not an octal mode"]


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


def test_action_entries_carry_text_or_role_files_as_bytes(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_bytes(b"x = 1\n\n")
    files = [
        {"dest": "/etc/a.conf", "content": "k = \u00e9\n", "mode": "0640", "group": "svc"},
        # an unquoted YAML 0755 is the integer 493: still octal 0755 on the host
        {"dest": "/opt/probe.py", "src": "probe.py", "mode": 493, "diff": False},
    ]
    got_files, got_dirs = action.entry_specs(
        files, [{"path": "/etc", "mode": 0o755}], lambda name: str(tmp_path / name)
    )
    assert got_files == [
        {"dest": "/etc/a.conf", "mode": "0640", "group": "svc",
         "content": base64.b64encode("k = \u00e9\n".encode()).decode()},
        {"dest": "/opt/probe.py", "mode": "0755", "diff": False,
         "content": base64.b64encode(b"x = 1\n\n").decode()},
    ]  # fmt: skip
    assert got_dirs == [{"path": "/etc", "mode": "0755"}]
    find = lambda name: str(tmp_path / name)  # noqa: E731
    for bad, message in (
        ({"dest": "/x", "mode": "0644"}, "give one of content and src"),
        ({"dest": "/x", "mode": "0644", "content": "a", "src": "b"}, "give one of content and src"),
        ({"dest": "/x", "mode": "0644", "content": {"a": 1}}, "content is not text"),
        ({"dest": "/x", "content": "a"}, "names no mode"),
        (
            {"dest": "/x", "mode": "0644", "content": "a", "force": True},
            r"unknown keys \['force'\]",
        ),
        ({"dest": "/x", "mode": "0644", "src": "nope.py"}, r"cannot read .*/nope\.py"),
    ):
        with pytest.raises(AnsibleActionFail, match=message):
            action.entry_specs([bad], [], find)


def test_a_task_s_sets_are_its_own_then_those_it_lists() -> None:
    own = {"payload": "smoke", "names": ["a.py"], "dest_dir": "/opt/s", "mode": "0755"}
    other = {"payload": "probe", "names": ["gpu_probe.py"], "dest_dir": "/opt/s"}
    assert action.sets_of({**own, "owner": "root", "sets": [other]}) == [own, other]
    assert action.sets_of({"files": [], "sets": [other]}) == [other]
    assert action.sets_of({"directories": []}) == []
    assert action.sets_of({"owner": "root"}) == [{}]  # names nothing: set_specs says so
    with pytest.raises(AnsibleActionFail, match="sets must be a list of mappings"):
        action.sets_of({"sets": "smoke"})
    with pytest.raises(AnsibleActionFail, match="names is required"):
        action.set_specs({})
    with pytest.raises(AnsibleActionFail, match=r"unknown keys \['src'\] in a set"):
        action.set_specs({**own, "src": "x"})


def test_a_template_lookup_writes_what_the_template_module_writes(tmp_path: Path) -> None:
    """The roles moved their template tasks into gpuprov_files with a template lookup as
    content: the bytes must be the template module's (ansible_managed, trim_blocks, the last
    newline), or every converged host would be rewritten and its services restarted once.
    A real play over the local connection, with --diff."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "files").mkdir()
    (tmp_path / "templates" / "t.j2").write_text(
        "# {{ ansible_managed }}\n{% for k in keys %}\n{{ k }} = {{ value }}\n{% endfor %}\nend\n\n"
    )
    # the shape of the JSON configurations (one expression and a newline), with task vars
    (tmp_path / "templates" / "j.j2").write_text("{{ {'k': keys, 'v': extra} | to_nice_json }}\n")
    (tmp_path / "files" / "s.py").write_bytes(b"print(1)\n\n")
    out = tmp_path / "out"
    book = tmp_path / "book.yml"
    book.write_text(
        textwrap.dedent(
            f"""\
            - hosts: h1
              gather_facts: false
              vars: {{keys: [a, b], value: 1}}
              tasks:
                - ansible.builtin.file: {{path: "{out}/module", state: directory, mode: "0755"}}
                - ansible.builtin.template: {{src: t.j2, dest: "{out}/module/t", mode: "0644"}}
                - ansible.builtin.template: {{src: j.j2, dest: "{out}/module/j", mode: "0644"}}
                  vars: {{extra: 2}}
                - gpuprov_files:
                    owner: {USER}
                    group: {GROUP}
                    directories:
                      - {{path: "{out}/batched", mode: "0750"}}
                      - {{path: "{out}/set", mode: "0755"}}
                    src_dir: "{tmp_path}/files"
                    names: [s.py]
                    dest_dir: "{out}/set"
                    mode: "0700"
                    files:
                      - dest: "{out}/batched/t"
                        content: "{{{{ lookup('ansible.builtin.template', 't.j2') }}}}"
                        mode: "0644"
                      - dest: "{out}/batched/j"
                        content: "{{{{ lookup('ansible.builtin.template', 'j.j2') }}}}"
                        mode: 0644  # unquoted: the integer 420
                      - {{dest: "{out}/batched/s.py", src: s.py, mode: "0755", diff: false}}
                  vars: {{extra: 2}}
                  register: batched
                - ansible.builtin.copy:
                    content: "{{{{ batched.changed_files | to_json }}}}"
                    dest: "{out}/changed.json"
                    mode: "0644"
            """
        )
    )
    check = run_local_play(book, tmp_path, extra=["--check", "--diff"])
    assert f"+++ after: {out}/batched/t" in check.stdout
    assert "print(1)" not in check.stdout  # diff: false
    assert not out.exists()
    run_local_play(book, tmp_path)
    assert (out / "batched" / "t").read_bytes() == (out / "module" / "t").read_bytes()
    assert (out / "batched" / "t").read_text().startswith("# Ansible managed\na = 1\nb = 1\nend\n")
    assert (out / "batched" / "j").read_bytes() == (out / "module" / "j").read_bytes()
    assert json.loads((out / "batched" / "j").read_text()) == {"k": ["a", "b"], "v": 2}
    assert (out / "batched" / "j").read_text().endswith("}\n")
    assert stat.S_IMODE((out / "batched" / "j").stat().st_mode) == 0o644
    assert (out / "batched" / "s.py").read_bytes() == b"print(1)\n\n"
    assert stat.S_IMODE((out / "batched").stat().st_mode) == 0o750
    assert stat.S_IMODE((out / "set" / "s.py").stat().st_mode) == 0o700
    assert yaml.safe_load((out / "changed.json").read_text()) == [
        str(out / p)
        for p in ("batched", "set", "batched/t", "batched/j", "batched/s.py", "set/s.py")
    ]
    run_local_play(book, tmp_path)
    assert yaml.safe_load((out / "changed.json").read_text()) == []


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
