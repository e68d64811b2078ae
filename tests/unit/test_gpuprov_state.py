"""plugins/modules/gpuprov_state.py (the verifying fast path's probe, issue 19) on real files,
directories, commands and dpkg packages of this machine, and its controller-side half, the
filter plugins/filter/gpuprov_state.py (the digest of a role's inputs).

The module and the filter share a file name, and plugins/filter comes first on pytest's
pythonpath: ``import gpuprov_state`` is the filter. The module is run as a program instead,
the module arguments on stdin as Ansible sends them, so each case below is one real module
run (record, probe or forget) and reads what the module printed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gpuprov_state as state_filter  # plugins/filter/gpuprov_state.py (pytest's pythonpath)
import pytest
from module_run import run_module

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "gpuprov_state.py"
DPKG_QUERY = shutil.which("dpkg-query")
ABSENT_PACKAGE = "gpuprov-surely-absent-package"


class StateModule:
    """gpuprov_state for a role ``demo`` whose records are kept under ``records``."""

    def __init__(self, records: Path) -> None:
        self.records = records
        self.path = records / "demo.json"
        self.env: dict[str, str] | None = None  # the module's environment (None: this one's)

    def __call__(
        self,
        state: str = "probe",
        spec: dict[str, Any] | None = None,
        inputs: str = "inputs-1",
        check: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        args = {
            "role": "demo",
            "dir": str(self.records),
            "state": state,
            "inputs": inputs,
            "spec": spec if spec is not None else {},
            "_ansible_check_mode": check,
            **extra,
        }
        result = run_module(MODULE, args, env=self.env)
        assert result.get("failed") or result["changed"] is False, result
        return result

    def drift(self, spec: dict[str, Any], change: Any) -> list[str]:
        """Record ``spec``, make ``change`` on the host, probe: what the probe says differs."""
        assert self("record", spec)["converged"] is True
        change()
        probed = self("probe", spec)
        assert probed["converged"] is (not probed["differs"])
        differs: list[str] = probed["differs"]
        return differs


@pytest.fixture
def module(tmp_path: Path) -> StateModule:
    return StateModule(tmp_path / "records")


def _file(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def _venv(root: Path) -> Path:
    """A venv-like directory: bin/python and an empty lib/python3.X/site-packages."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    (root / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    return root


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - the fingerprint the module prints


def _one(differs: list[str], name: str) -> str:
    """The one difference, which must be about ``name``."""
    assert len(differs) == 1, differs
    assert differs[0].startswith(f"{name}: "), differs
    return differs[0]


# The module: record, probe, forget


def test_record_then_probe_is_converged(module: StateModule, tmp_path: Path) -> None:
    conf = _file(tmp_path / "etc" / "demo.conf", "a = 1\n")
    tree = tmp_path / "opt" / "demo"
    _file(tree / "run.py", "print('hi')\n")
    _file(tree / "sub" / "data.txt", "data\n")
    doc = _file(tmp_path / "daemon.json", json.dumps({"log-driver": "local", "other": 1}))
    spec = {
        "paths": [str(conf), str(tmp_path / "etc"), str(tmp_path / "missing")],
        "trees": [str(tree)],
        "json_keys": {str(doc): ["log-driver", "not-there"]},
        "venvs": [str(_venv(tmp_path / "venv"))],
        "commands": [["cat", str(conf)], ["false"]],
    }
    assert not module.path.exists()
    recorded = module("record", spec)
    assert recorded == {**recorded, "converged": True, "differs": [], "record": str(module.path)}
    assert module.path.is_file()
    assert module.path.stat().st_mode & 0o777 == 0o600
    record = json.loads(module.path.read_text(encoding="utf-8"))
    assert record["inputs"] == "inputs-1"
    assert record["seen"][f"path {tmp_path / 'missing'}"] == "absent"
    assert record["seen"][f"json {doc} log-driver"] == '"local"'
    assert record["seen"][f"json {doc} not-there"] == "key absent"
    assert record["seen"]["command false"].startswith("rc 1 ")
    probed = module("probe", spec)
    assert probed["converged"] is True
    assert probed["differs"] == []
    assert probed["record"] == str(module.path)
    assert probed["recorded"] is True


def test_no_record_is_not_converged(module: StateModule) -> None:
    probed = module("probe", {"paths": ["/etc/hostname"]})
    assert probed["converged"] is False
    assert probed["differs"] == [f"no record of a converge at {module.path}"]
    assert probed["recorded"] is False  # the roles skip their forget: nothing to remove


def test_an_unreadable_record_is_no_record(module: StateModule) -> None:
    spec = {"paths": ["/etc/hostname"]}
    module("record", spec)
    module.path.write_text("{not json", encoding="utf-8")
    probed = module("probe", spec)
    assert probed["differs"] == [f"no record of a converge at {module.path}"]
    assert probed["recorded"] is True  # but a file to remove before the role changes anything


def test_changed_inputs_are_named(module: StateModule) -> None:
    spec = {"paths": ["/etc/hostname"]}
    module("record", spec, inputs="digest-a")
    assert module("probe", spec, inputs="digest-a")["converged"] is True
    probed = module("probe", spec, inputs="digest-b")
    assert probed["converged"] is False
    assert len(probed["differs"]) == 1
    assert "inputs changed" in probed["differs"][0]


def test_a_changed_spec_is_named(module: StateModule, tmp_path: Path) -> None:
    first = _file(tmp_path / "a", "a\n")
    second = _file(tmp_path / "b", "b\n")
    module("record", {"paths": [str(first)]})
    probed = module("probe", {"paths": [str(first), str(second)]})
    assert probed["converged"] is False
    assert probed["differs"] == ["the list of what the role manages changed"]


def test_forget_removes_the_record(module: StateModule) -> None:
    spec = {"paths": ["/etc/hostname"]}
    module("record", spec)
    assert module.path.is_file()
    forgot = module("forget")
    assert forgot["changed"] is False
    assert not module.path.exists()
    assert module("probe", spec)["differs"][0].startswith("no record")
    assert "failed" not in module("forget")  # nothing to forget is fine


def test_check_mode_record_writes_nothing(module: StateModule) -> None:
    recorded = module("record", {"paths": ["/etc/hostname"]}, check=True)
    assert recorded["converged"] is False
    assert not module.records.exists()


def test_check_mode_forget_keeps_the_record(module: StateModule) -> None:
    spec = {"paths": ["/etc/hostname"]}
    module("record", spec)
    before = module.path.read_bytes()
    module("forget", check=True)
    assert module.path.read_bytes() == before
    assert module("probe", spec, check=True)["converged"] is True


# The module: each kind of drift is found and named


def test_file_content_change(module: StateModule, tmp_path: Path) -> None:
    conf = _file(tmp_path / "demo.conf", "a = 1\n")
    differs = module.drift({"paths": [str(conf)]}, lambda: conf.write_text("a = 2\n"))
    line = _one(differs, f"path {conf}")
    assert line.count("sha1") == 2
    assert line.endswith(f"-> file 0644 {os.getuid()}:{os.getgid()} sha1 " + _sha1(b"a = 2\n"))


def test_mode_change(module: StateModule, tmp_path: Path) -> None:
    conf = _file(tmp_path / "demo.conf", "a = 1\n", mode=0o644)
    differs = module.drift({"paths": [str(conf)]}, lambda: conf.chmod(0o600))
    line = _one(differs, f"path {conf}")
    assert ": file 0644 " in line
    assert "-> file 0600 " in line


def test_file_deleted(module: StateModule, tmp_path: Path) -> None:
    conf = _file(tmp_path / "demo.conf", "a = 1\n")
    differs = module.drift({"paths": [str(conf)]}, conf.unlink)
    assert _one(differs, f"path {conf}").endswith("-> absent")


def test_a_link_retargeted(module: StateModule, tmp_path: Path) -> None:
    link = tmp_path / "current"
    link.symlink_to("v1")

    def retarget() -> None:
        link.unlink()
        link.symlink_to("v2")

    differs = module.drift({"paths": [str(link)]}, retarget)
    assert _one(differs, f"path {link}").endswith(": link -> v1 -> link -> v2")


def test_a_file_added_in_a_tree(module: StateModule, tmp_path: Path) -> None:
    tree = tmp_path / "scripts"
    _file(tree / "one.py", "1\n")
    differs = module.drift({"trees": [str(tree)]}, lambda: _file(tree / "deep" / "two.py", "2\n"))
    line = _one(differs, f"tree {tree}")
    assert ": 1 entries sha1 " in line
    assert "-> 3 entries sha1 " in line  # deep/ and deep/two.py


def test_a_file_changed_deep_in_a_tree(module: StateModule, tmp_path: Path) -> None:
    tree = tmp_path / "scripts"
    deep = _file(tree / "a" / "b" / "c.py", "1\n")
    differs = module.drift({"trees": [str(tree)]}, lambda: deep.write_text("2\n"))
    _one(differs, f"tree {tree}")


def test_pycache_in_a_tree_is_ignored(module: StateModule, tmp_path: Path) -> None:
    tree = tmp_path / "scripts"
    _file(tree / "run.py", "1\n")
    spec = {"trees": [str(tree)]}

    def pycache() -> None:
        _file(tree / "__pycache__" / "run.cpython-311.pyc", "bytecode")

    assert module.drift(spec, pycache) == []
    # The same kind of change outside __pycache__ is found (the tree is read at all).
    _file(tree / "cache" / "run.cpython-311.pyc", "bytecode")
    _one(module("probe", spec)["differs"], f"tree {tree}")


def test_json_owned_key_change_found_others_ignored(module: StateModule, tmp_path: Path) -> None:
    doc = tmp_path / "daemon.json"
    doc.write_text(json.dumps({"log-driver": "local", "theirs": [1]}), encoding="utf-8")
    spec = {"json_keys": {str(doc): ["log-driver"]}}

    def theirs_change() -> None:
        doc.write_text(json.dumps({"log-driver": "local", "theirs": [2], "new": 0}))

    assert module.drift(spec, theirs_change) == []
    doc.write_text(json.dumps({"log-driver": "json-file", "theirs": [2]}), encoding="utf-8")
    line = _one(module("probe", spec)["differs"], f"json {doc} log-driver")
    assert line.endswith(': "local" -> "json-file"')


def test_json_key_removed_and_file_deleted(module: StateModule, tmp_path: Path) -> None:
    doc = _file(tmp_path / "daemon.json", json.dumps({"log-driver": "local"}))
    spec = {"json_keys": {str(doc): ["log-driver"]}}
    differs = module.drift(spec, lambda: doc.write_text("{}"))
    assert _one(differs, f"json {doc} log-driver").endswith("-> key absent")
    doc.unlink()
    assert module("probe", spec)["differs"][0].endswith("-> file absent")


def test_command_output_change(module: StateModule, tmp_path: Path) -> None:
    version = _file(tmp_path / "VERSION", "1.0\n")
    argv = ["cat", str(version)]
    differs = module.drift({"commands": [argv]}, lambda: version.write_text("1.1\n"))
    line = _one(differs, f"command cat {version}")
    before, after = _sha1(b"1.0\n"), _sha1(b"1.1\n")
    assert line.endswith(f": rc 0 output sha1 {before} -> rc 0 output sha1 {after}")


def test_command_exit_status_change(module: StateModule, tmp_path: Path) -> None:
    flag = tmp_path / "broken"
    argv = ["test", "!", "-e", str(flag)]  # an import check that starts to fail
    differs = module.drift({"commands": [argv]}, flag.touch)
    line = _one(differs, f"command test ! -e {flag}")
    assert ": rc 0 output" in line
    assert "-> rc 1 output" in line


def test_a_missing_command_is_read_not_raised(module: StateModule, tmp_path: Path) -> None:
    spec = {"commands": [[str(tmp_path / "no-such-tool"), "--version"]]}
    module("record", spec)
    record = json.loads(module.path.read_text(encoding="utf-8"))
    assert record["seen"] == {f"command {tmp_path / 'no-such-tool'} --version": "not found"}


def test_venv_gains_a_distribution(module: StateModule, tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv")
    site = venv / "lib" / "python3.11" / "site-packages"
    _file(site / "torch-2.5.0.dist-info" / "METADATA", "Name: torch\n")

    def install() -> None:
        (site / "numpy-2.1.0.dist-info").mkdir()
        _file(site / "numpy" / "__init__.py", "")  # not a distribution: not counted

    line = _one(module.drift({"venvs": [str(venv)]}, install), f"venv {venv}")
    python = os.path.realpath(sys.executable)
    assert f": python {python}, 1 distributions sha1 " in line
    assert f"-> python {python}, 2 distributions sha1 " in line


def test_venv_loses_its_interpreter(module: StateModule, tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv")
    differs = module.drift({"venvs": [str(venv)]}, (venv / "bin" / "python").unlink)
    assert _one(differs, f"venv {venv}").endswith("-> no bin/python")


def test_only_what_drifted_is_named(module: StateModule, tmp_path: Path) -> None:
    kept = _file(tmp_path / "kept", "same\n")
    changed = _file(tmp_path / "changed", "before\n")
    spec = {"paths": [str(kept), str(changed)], "commands": [["cat", str(kept)]]}
    differs = module.drift(spec, lambda: changed.write_text("after\n"))
    _one(differs, f"path {changed}")


# The module: packages through dpkg-query


@pytest.mark.skipif(DPKG_QUERY is None, reason="dpkg-query: a Debian-family machine")
def test_packages_recorded_with_version_or_absent(module: StateModule) -> None:
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "dpkg"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert version
    spec = {"packages": ["dpkg", ABSENT_PACKAGE]}
    module("record", spec)
    seen = json.loads(module.path.read_text(encoding="utf-8"))["seen"]
    assert seen == {"package dpkg": f"{version} ii", f"package {ABSENT_PACKAGE}": "absent"}
    assert module("probe", spec)["converged"] is True


@pytest.mark.skipif(DPKG_QUERY is None, reason="dpkg-query: a Debian-family machine")
def test_a_package_installed_since_the_record_is_named(module: StateModule) -> None:
    module("record", {"packages": [ABSENT_PACKAGE]})
    record = json.loads(module.path.read_text(encoding="utf-8"))
    # Edit the record as if the package had been installed at 1.0 when it was made.
    record["seen"][f"package {ABSENT_PACKAGE}"] = "1.0 ii"
    module.path.write_text(json.dumps(record), encoding="utf-8")
    differs = module("probe", {"packages": [ABSENT_PACKAGE]})["differs"]
    assert differs == [f"package {ABSENT_PACKAGE}: 1.0 ii -> absent"]


def test_packages_on_a_host_without_a_package_manager_fail_naming_them(
    module: StateModule, tmp_path: Path
) -> None:
    """No dpkg-query nor rpm on PATH: a record would hold no reading, and every later probe on
    that host would match it without reading a package (the review of 2026-12-06)."""
    (tmp_path / "bin").mkdir()
    module.env = {**os.environ, "PATH": str(tmp_path / "bin")}
    spec = {"packages": ["docker.io"]}
    for state in ("record", "probe"):
        got = module(state, spec)
        if state == "probe":  # no record: the probe says so before it reads anything
            assert got["differs"] == [f"no record of a converge at {module.path}"]
            continue
        assert got["failed"] is True
        assert got["msg"] == (
            "gpuprov_state for role demo: cannot read the packages docker.io: neither "
            "dpkg-query with a package database (/var/lib/dpkg/status, listing packages) nor "
            "rpm on this host's PATH"
        )
        assert not module.path.exists()


# The module: bad arguments fail, naming what is wrong


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"bogus": ["x"]}, "bogus"),
        ({"packages": "docker.io"}, "spec.packages"),
        ({"paths": {"/etc/x": 1}}, "spec.paths"),
        ({"json_keys": ["/etc/docker/daemon.json"]}, "spec.json_keys"),
        ({"json_keys": {"/etc/docker/daemon.json": "log-driver"}}, "spec.json_keys"),
        ({"commands": ["python3 -c 'import torch'"]}, "spec.commands"),
        ({"commands": [[]]}, "spec.commands"),
    ],
)
def test_a_bad_spec_fails_naming_the_key(
    module: StateModule, spec: dict[str, Any], named: str
) -> None:
    result = module("record", spec)  # the spec is checked before any state is read or kept
    assert result["failed"] is True
    assert named in result["msg"]
    assert "role demo" in result["msg"]
    assert not module.records.exists()


def test_a_role_that_is_not_a_plain_name_fails(module: StateModule) -> None:
    result = module("record", role="../etc/passwd")
    assert result["failed"] is True
    assert "'../etc/passwd'" in result["msg"]
    assert not module.records.exists()


def test_an_unknown_state_fails(module: StateModule) -> None:
    result = module("erase")
    assert result["failed"] is True
    assert "state" in result["msg"]
    assert "erase" in result["msg"]


# The filter: the digest of a role's inputs


@pytest.fixture
def role_path(tmp_path: Path) -> Path:
    role = tmp_path / "roles" / "demo"
    _file(role / "tasks" / "main.yml", "- name: x\n  ansible.builtin.debug:\n")
    _file(role / "defaults" / "main.yml", "demo_port: 80\n")
    state_filter.tree_digest.cache_clear()
    return role


def _digest(values: dict[str, Any], role: Path, facts: dict[str, Any] | None = None) -> str:
    # tree_digest is cached for the run of one playbook (a role's files do not change
    # under it); a test that changes them clears the cache as a new run would start empty.
    state_filter.tree_digest.cache_clear()
    digest: str = state_filter.state_inputs(values, str(role), facts)
    return digest


VALUES = {"demo_port": 80, "demo_users": ["a", "b"], "proxy_env": {"http_proxy": ""}}
FACTS = {"os": "Ubuntu", "version": "24.04", "kernel": "6.8.0-45-generic"}


def test_the_filter_is_registered() -> None:
    filters = state_filter.FilterModule().filters()
    assert filters == {"gpuprov_state_inputs": state_filter.state_inputs}


def test_same_inputs_same_digest(role_path: Path) -> None:
    first = _digest(VALUES, role_path, FACTS)
    assert len(first) == 64
    assert _digest(json.loads(json.dumps(VALUES)), role_path, dict(FACTS)) == first


def test_key_order_does_not_matter(role_path: Path) -> None:
    reordered = {k: VALUES[k] for k in reversed(list(VALUES))}
    assert list(reordered) != list(VALUES)
    facts = {k: FACTS[k] for k in reversed(list(FACTS))}
    assert _digest(reordered, role_path, facts) == _digest(VALUES, role_path, FACTS)


@pytest.mark.parametrize(
    ("values", "facts"),
    [
        ({**VALUES, "demo_port": 81}, FACTS),
        ({**VALUES, "demo_users": ["b", "a"]}, FACTS),
        ({**VALUES, "demo_new": None}, FACTS),
        ({k: v for k, v in VALUES.items() if k != "proxy_env"}, FACTS),
        (VALUES, {**FACTS, "kernel": "6.8.0-47-generic"}),
        (VALUES, {**FACTS, "arch": "aarch64"}),
        (VALUES, None),
    ],
    ids=[
        "value",
        "list-order",
        "new-var",
        "var-gone",
        "fact",
        "new-fact",
        "no-facts",
    ],
)
def test_a_changed_value_or_fact_changes_the_digest(
    role_path: Path, values: dict[str, Any], facts: dict[str, Any] | None
) -> None:
    assert _digest(values, role_path, facts) != _digest(VALUES, role_path, FACTS)


@pytest.mark.parametrize(
    "knob",
    [
        {"gpuprov_driver_serial": "50%"},
        {"gpuprov_driver_drain_command": ["scontrol", "update", "state=drain"]},
        {"nvidia_driver_defer_changes": True},
    ],
    ids=["serial", "drain-hook", "defer"],
)
def test_how_a_driver_change_rolls_out_is_no_input(role_path: Path, knob: dict[str, Any]) -> None:
    """Changing a batch size or a hook of playbooks/driver.yml re-converges no role on any host
    (every role's state_vars match gpuprov_*; before, all but the driver's re-ran once)."""
    assert _digest({**VALUES, **knob}, role_path, FACTS) == _digest(VALUES, role_path, FACTS)
    # A variable of the same family that is a role input still counts.
    assert _digest({**VALUES, "gpuprov_torch_version": "2.5.1"}, role_path, FACTS) != _digest(
        VALUES, role_path, FACTS
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda role: (role / "defaults" / "main.yml").write_text("demo_port: 8080\n"),
        lambda role: _file(role / "templates" / "demo.conf.j2", "port={{ demo_port }}\n"),
        lambda role: (role / "tasks" / "main.yml").rename(role / "tasks" / "install.yml"),
        lambda role: (role / "defaults" / "main.yml").unlink(),
    ],
    ids=["content", "file-added", "file-renamed", "file-removed"],
)
def test_a_changed_role_file_changes_the_digest(role_path: Path, change: Any) -> None:
    before = _digest(VALUES, role_path, FACTS)
    change(role_path)
    assert _digest(VALUES, role_path, FACTS) != before


def test_bytecode_and_backups_in_the_role_are_ignored(role_path: Path) -> None:
    before = _digest(VALUES, role_path, FACTS)
    _file(role_path / "files" / "__pycache__" / "x.cpython-311.pyc", "bytecode")
    _file(role_path / "files" / "x.pyc", "bytecode")
    _file(role_path / "tasks" / "main.yml~", "editor back-up")
    _file(role_path / "tasks" / ".main.yml.swp", "editor swap")
    assert _digest(VALUES, role_path, FACTS) == before
    _file(role_path / "files" / "x.py", "source")
    assert _digest(VALUES, role_path, FACTS) != before


def test_a_callback_is_no_input_other_plugins_are(
    role_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callbacks run on the controller alone: editing one re-runs no role (before, any change
    under plugins/ made every role's next probe say "inputs changed")."""
    plugins = tmp_path / "plugins"
    _file(plugins / "callback" / "timer.py", "v = 1\n")
    _file(plugins / "filter" / "demo.py", "v = 1\n")
    _file(plugins / "modules" / "callback" / "demo.py", "v = 1\n")
    monkeypatch.setattr(state_filter, "PLUGINS", plugins)
    before = _digest(VALUES, role_path, FACTS)
    (plugins / "callback" / "timer.py").write_text("v = 2\n")
    _file(plugins / "callback" / "new.py", "v = 1\n")
    assert _digest(VALUES, role_path, FACTS) == before
    # Only the top-level callback directory is left out.
    for changed in (plugins / "filter" / "demo.py", plugins / "modules" / "callback" / "demo.py"):
        changed.write_text("v = 2\n")
        after = _digest(VALUES, role_path, FACTS)
        assert after != before
        before = after


def test_the_digest_does_not_depend_on_where_the_role_is(tmp_path: Path, role_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "demo"
    shutil.copytree(role_path, moved)
    assert _digest(VALUES, moved, FACTS) == _digest(VALUES, role_path, FACTS)


def test_named_distributions_are_read_others_ignored(module: StateModule, tmp_path: Path) -> None:
    """`distributions` reads only the versions of the names a role installs into an
    environment other roles install into too: another role's install is not drift, a
    changed or removed version of one's own is."""
    venv = _venv(tmp_path / "venv")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.5.0+cpu.dist-info").mkdir(parents=True)
    (site / "Torch_Model.Archiver-0.12.0.dist-info").mkdir()
    spec = {"distributions": {str(venv): ["torch", "torch-model-archiver", "absent-one"]}}
    assert module("record", spec)["converged"] is True
    (site / "jupyterlab-4.6.6.dist-info").mkdir()  # another role's install
    probed = module("probe", spec)
    assert (probed["converged"], probed["differs"]) == (True, [])
    (site / "torch-2.5.0+cpu.dist-info").rename(site / "torch-2.6.0+cpu.dist-info")
    differs = module("probe", spec)["differs"]
    assert differs == [f"distribution torch in {venv}: 2.5.0+cpu -> 2.6.0+cpu"], differs
    seen = json.loads(module.path.read_text())["seen"]
    assert seen[f"distribution torch-model-archiver in {venv}"] == "0.12.0"
    assert seen[f"distribution absent-one in {venv}"] == "absent"


def test_report_directories_are_not_inputs(role_path: Path) -> None:
    """Running from another checkout (another reports/ path) must not re-run every role."""
    moved = {**VALUES, "gpuprov_report_root": "/elsewhere/reports", "demo_report_dir": "/x"}
    assert _digest(moved, role_path, FACTS) == _digest(VALUES, role_path, FACTS)


def test_mixed_key_types_digest(role_path: Path) -> None:
    """Some variables map ints and strings alike (gpu_monitoring_dcgm_tags: 550 and "default")."""
    values = {**VALUES, "demo_tags": {550: "a", "default": "b"}}
    assert _digest(values, role_path, FACTS) != _digest(VALUES, role_path, FACTS)


@pytest.mark.parametrize(
    "planned",
    [
        {"gpuprov_plan": {"torch": "2.5.1", "driver": {"branch": 550}}},
        {"nvidia_driver_packaged_branches": [535, 550], "nvidia_driver_packaged_os": "debian12"},
    ],
    ids=["plan", "packaged-branches"],
)
def test_what_plan_yml_sets_is_no_variable_input(role_path: Path, planned: dict[str, Any]) -> None:
    """A role that does not read the plan has none of these facts when its playbook runs
    alone (no plan.yml in the run); site.yml has them: the same role on the same host must
    get the same digest from both (the roles that read the plan plan the host themselves
    when run alone and pass the plan with their facts, below)."""
    assert _digest({**VALUES, **planned}, role_path, FACTS) == _digest(VALUES, role_path, FACTS)
    plan = {"torch": "2.5.1"}
    with_plan = _digest(VALUES, role_path, {**FACTS, "plan": plan})
    assert with_plan != _digest(VALUES, role_path, {**FACTS, "plan": {"torch": "2.6.0"}})
    assert with_plan != _digest(VALUES, role_path, FACTS)
