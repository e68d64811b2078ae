"""Unit tests for plugins/modules/apt_ready.py (dpkg repair, honest list freshness, fetch errors).

The module's decisions are tested here with a scripted command runner standing in for
dpkg/apt (their output texts are the ones apt 2.6 prints); tests/lab/test_faults.py runs
the real thing on lab hosts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apt_ready  # plugins/modules/apt_ready.py (on pytest's pythonpath)
import pytest

MIRROR = "http://172.18.0.2:8080/stable/deb/amd64"
UPDATE_UNREACHABLE = f"""\
Hit:1 http://deb.debian.org/debian bookworm InRelease
Err:2 {MIRROR}  InRelease
  Could not connect to 172.18.0.2:8080 (172.18.0.2). - connect (113: No route to host)
Reading package lists...
W: Failed to fetch {MIRROR}/InRelease  Could not connect to 172.18.0.2:8080 (172.18.0.2). \
- connect (113: No route to host)
E: Some index files failed to download. They have been ignored, or old ones used instead.
"""
POLICY = """\
nvidia-container-toolkit:
  Installed: (none)
  Candidate: 1.18.0-1
  Version table:
     1.18.0-1 500
        500 http://172.18.0.2:8080/stable/deb/amd64  Packages
libnvidia-container1:
  Installed: (none)
  Candidate: (none)
  Version table:
"""


class _Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class FakeModule:
    """The slice of AnsibleModule that AptReady uses."""

    def __init__(self, check_mode: bool = False, **params: Any) -> None:
        self.params: dict[str, Any] = {
            "repair": True,
            "update": "auto",
            "valid_time": 3600,
            "packages": [],
            "download": False,
            "sources": {},
            "lock_timeout": 0,
            "stamp": "",
            **params,
        }
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def fail_json(self, **kwargs: Any) -> None:
        raise _Failed(kwargs)


class Script:
    """A command runner that answers from a list of (argv prefix, rc, stdout) rules, in order."""

    def __init__(self, rules: list[tuple[tuple[str, ...], int, str]]) -> None:
        self.rules = rules
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(tuple(argv))
        for i, (prefix, rc, out) in enumerate(self.rules):
            if tuple(argv[: len(prefix)]) == prefix:
                if len([r for r in self.rules if r[0] == prefix]) > 1:
                    self.rules.pop(i)  # repeated rules answer in turn
                return rc, out, ""
        return 0, "", ""

    def ran(self, *prefix: str) -> bool:
        return any(c[: len(prefix)] == prefix for c in self.calls)


def _ready(tmp_path: Path, module: FakeModule, script: Script) -> Any:
    module.params["stamp"] = module.params["stamp"] or str(tmp_path / "stamp.json")
    obj = apt_ready.AptReady(module, run=script)
    obj.dpkg_updates = str(tmp_path / "updates")
    obj.apt_lists = str(tmp_path / "lists")
    obj.source_globs = ((str(tmp_path / "sources"), "*"),)
    for d in ("updates", "lists", "sources"):
        (tmp_path / d).mkdir(exist_ok=True)
    (tmp_path / "lists" / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").touch()
    (tmp_path / "sources" / "debian.sources").write_text("Types: deb\n")
    return obj


# ---------------------------------------------------------------------------
# pure helpers


def test_pending_updates_ignores_scratch_file() -> None:
    assert apt_ready.pending_updates(["0001", "tmp.i", "0000"]) == ["0000", "0001"]


def test_fetch_errors_prefers_the_full_urls_of_the_summary() -> None:
    errors = apt_ready.fetch_errors(UPDATE_UNREACHABLE)
    assert errors == [
        (
            f"{MIRROR}/InRelease",
            "Could not connect to 172.18.0.2:8080 (172.18.0.2). - connect (113: No route to host)",
        )
    ]


def test_fetch_errors_falls_back_to_progress_lines() -> None:
    text = f"Err:2 {MIRROR}  InRelease\n  Connection timed out [IP: 172.18.0.2 8080]\n"
    assert apt_ready.fetch_errors(text) == [(MIRROR, "Connection timed out [IP: 172.18.0.2 8080]")]


def test_variable_for_takes_the_longest_prefix_and_ignores_arch_placeholder() -> None:
    sources = {
        "lab_mirror_url": "http://172.18.0.2:8080",
        "nvidia_container_toolkit_apt_repo_url": "http://172.18.0.2:8080/stable/deb/$(ARCH)",
        "empty": "",
    }
    assert (
        apt_ready.variable_for(f"{MIRROR}/InRelease", sources)
        == "nvidia_container_toolkit_apt_repo_url"
    )
    assert apt_ready.variable_for("http://deb.debian.org/debian/x", sources) is None


def test_explain_fetch_names_url_variable_and_what_to_check() -> None:
    line = apt_ready.explain_fetch(
        f"{MIRROR}/InRelease", "No route to host", {"nvidia_container_toolkit_apt_repo_url": MIRROR}
    )
    assert f"{MIRROR}/InRelease" in line
    assert "(No route to host)" in line
    assert "set by nvidia_container_toolkit_apt_repo_url" in line
    for hint in ("mirror", "proxy", "CA"):
        assert hint in line


@pytest.mark.parametrize(
    ("stamp", "lists", "now", "fresh", "why"),
    [
        ({"digest": "d", "time": 1000}, True, 1100, True, "fresh"),
        (None, True, 1100, False, "no record"),
        ({"digest": "other", "time": 1000}, True, 1100, False, "sources or keys changed"),
        ({"digest": "d", "time": 1000}, True, 5000, False, "4000 s old"),
        ({"digest": "d", "time": 1000}, False, 1100, False, "no package lists"),
        ({"digest": "d", "time": 2000}, True, 1000, False, "s old"),
    ],
    ids=["fresh", "no-stamp", "sources-changed", "too-old", "lists-gone", "clock-went-back"],
)
def test_freshness(
    stamp: dict[str, Any] | None, lists: bool, now: float, fresh: bool, why: str
) -> None:
    got, reason = apt_ready.freshness(stamp, "d", now, 3600, lists)
    assert got is fresh
    assert why in reason


def test_sources_digest_depends_on_content_not_order() -> None:
    a = [("/a", b"1"), ("/b", b"2")]
    assert apt_ready.sources_digest(a) == apt_ready.sources_digest(list(reversed(a)))
    assert apt_ready.sources_digest(a) != apt_ready.sources_digest([("/a", b"1"), ("/b", b"3")])


def test_no_candidate_reads_apt_cache_policy() -> None:
    names = ["nvidia-container-toolkit", "libnvidia-container1", "not-known"]
    assert apt_ready.no_candidate(POLICY, names) == ["libnvidia-container1", "not-known"]


def test_removals_and_space_error() -> None:
    assert apt_ready.removals("Inst a (1 x)\nRemv docker.io [1]\nConf a\n") == ["docker.io"]
    msg = "E: You don't have enough free space in /var/cache/apt/archives/."
    assert apt_ready.space_error(f"Need to get 40 MB\n{msg}\n") == msg[3:]
    assert apt_ready.space_error("all fine") is None


# ---------------------------------------------------------------------------
# the module's flow


def test_interrupted_dpkg_is_repaired_and_holds_kept(tmp_path: Path) -> None:
    script = Script(
        [
            (("dpkg", "--audit"), 0, "The following packages are only half configured:\n x\n"),
            (("dpkg", "--audit"), 0, ""),
            (("dpkg", "--audit"), 0, ""),
            (("apt-mark", "showhold"), 0, "docker.io\nnvidia-smi\n"),
            (("apt-mark", "showhold"), 0, "docker.io\n"),
        ]
    )
    module = FakeModule(update="never")
    obj = _ready(tmp_path, module, script)
    journal = tmp_path / "updates" / "0000"
    journal.write_text("")

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        if "--configure" in argv:  # what dpkg --configure -a does to its journal
            journal.unlink()
        return script(argv)

    obj.run = run
    result = obj.main()
    assert result["repaired"] is True
    assert result["changed"] is True
    assert script.ran("dpkg", "--force-confdef", "--force-confold", "--configure", "-a")
    assert script.ran("apt-mark", "hold", "nvidia-smi")
    assert not script.ran("apt-get", "-y")
    assert "dpkg was interrupted" in module.warnings[0]
    assert "pending dpkg journal" in module.warnings[0]


def test_clean_dpkg_is_left_alone(tmp_path: Path) -> None:
    script = Script([])
    result = _ready(tmp_path, FakeModule(update="never"), script).main()
    assert result["repaired"] is False
    assert result["changed"] is False
    assert not script.ran("dpkg", "--force-confdef")


def test_check_mode_repairs_nothing(tmp_path: Path) -> None:
    script = Script([(("dpkg", "--audit"), 0, "half configured: x\n")])
    module = FakeModule(check_mode=True, update="never")
    result = _ready(tmp_path, module, script).main()
    assert result["repaired"] is False
    assert not script.ran("dpkg", "--force-confdef")
    assert "would run dpkg --configure -a" in module.warnings[0]


def test_repair_refuses_when_apt_would_remove_packages(tmp_path: Path) -> None:
    script = Script(
        [
            (("dpkg", "--audit"), 0, "half installed: docker.io\n"),
            (("apt-get", "-s"), 0, "Remv docker.io [26.1]\n"),
        ]
    )
    with pytest.raises(_Failed) as failed:
        _ready(tmp_path, FakeModule(update="never"), script).main()
    assert "would remove docker.io" in failed.value.result["msg"]
    assert not script.ran("apt-get", "-y")


def test_failed_update_names_the_url_and_leaves_lists_stale(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps({"digest": "old", "time": 0}))
    script = Script([(("apt-get", "update"), 100, UPDATE_UNREACHABLE)])
    module = FakeModule(stamp=str(stamp), sources={"nvidia_container_toolkit_apt_repo_url": MIRROR})
    with pytest.raises(_Failed) as failed:
        _ready(tmp_path, module, script).main()
    msg = failed.value.result["msg"]
    assert f"could not fetch {MIRROR}/InRelease" in msg
    assert "set by nvidia_container_toolkit_apt_repo_url" in msg
    assert "not marked fresh" in msg
    assert not stamp.exists()


def test_successful_update_is_remembered_until_sources_change(tmp_path: Path) -> None:
    script = Script([])
    obj = _ready(tmp_path, FakeModule(), script)
    assert obj.main()["updated"] is True
    assert script.calls.count(tuple(script.calls[-1])) == 1
    second = _ready(tmp_path, FakeModule(), Script([])).main()
    assert second["updated"] is False
    assert second["update_reason"].startswith("fresh")
    (tmp_path / "sources" / "nvidia.sources").write_text("URIs: x\n")
    third = _ready(tmp_path, FakeModule(), Script([])).main()
    assert third["updated"] is True
    assert "changed" in third["update_reason"]


def test_missing_package_triggers_one_refresh_then_fails(tmp_path: Path) -> None:
    fresh_stamp = tmp_path / "stamp.json"
    script = Script([(("apt-cache", "policy"), 0, POLICY)])
    obj = _ready(tmp_path, FakeModule(), Script([]))
    obj.main()  # a successful update: lists fresh
    module = FakeModule(
        stamp=str(fresh_stamp),
        packages=["libnvidia-container1=1.18.0-1"],
        sources={"nvidia_container_toolkit_apt_repo_url": MIRROR},
    )
    with pytest.raises(_Failed) as failed:
        _ready(tmp_path, module, script).main()
    updates = [c for c in script.calls if c[:2] == ("apt-get", "update")]
    assert len(updates) == 1
    assert "No install candidate for libnvidia-container1" in failed.value.result["msg"]
    assert MIRROR in failed.value.result["msg"]


def test_missing_package_found_after_the_refresh(tmp_path: Path) -> None:
    _ready(tmp_path, FakeModule(), Script([])).main()
    script = Script(
        [
            (("apt-cache", "policy"), 0, "x:\n  Candidate: (none)\n"),
            (("apt-cache", "policy"), 0, "x:\n  Candidate: 1.0\n"),
        ]
    )
    result = _ready(tmp_path, FakeModule(packages=["x"]), script).main()
    assert result["updated"] is True
    assert "one refresh" in result["update_reason"]


def test_download_error_names_full_disk(tmp_path: Path) -> None:
    script = Script(
        [
            (("apt-cache", "policy"), 0, "x:\n  Candidate: 1.0\n"),
            (
                ("apt-get", "install"),
                100,
                "E: You don't have enough free space in /var/cache/apt/archives/.\n",
            ),
        ]
    )
    with pytest.raises(_Failed) as failed:
        _ready(tmp_path, FakeModule(packages=["x"], download=True), script).main()
    msg = failed.value.result["msg"]
    assert "enough free space in /var/cache/apt/archives/" in msg
    assert "nothing was installed" in msg


def test_reinstall_required_reads_dpkg_status_abbreviations() -> None:
    # dpkg-query's ${db:Status-Abbrev}: desired, status, error flag (R: reinstall required).
    status = "ii  bash\niHR docker.io\niU  runc\nrH  old-tool\niF  containerd\n"
    assert apt_ready.reinstall_required(status) == ["docker.io", "old-tool"]
    assert apt_ready.reinstall_required("ii  bash\n") == []


def test_a_half_installed_package_is_reinstalled(tmp_path: Path) -> None:
    """The host died while dpkg unpacked docker.io (the lab's fault suite saw this): configure
    and apt-get -f leave it 'iHR'; the module reinstalls it and keeps the holds."""
    mess = "The following packages are in a mess due to serious problems during\n docker.io\n"
    script = Script(
        [
            (("dpkg", "--audit"), 0, mess),  # needs_repair
            (("dpkg", "--audit"), 0, mess),  # after dpkg --configure -a
            (("dpkg", "--audit"), 0, mess),  # after apt-get -f install
            (("dpkg", "--audit"), 0, ""),  # after the reinstall
            (("dpkg-query", "-W"), 0, "ii  bash\niHR docker.io\n"),
            (("apt-mark", "showhold"), 0, "docker.io\n"),
        ]
    )
    module = FakeModule(update="never")
    result = _ready(tmp_path, module, script).main()
    assert result["repaired"] is True
    reinstall = [c for c in script.calls if c[:2] == ("apt-get", "install")]
    assert len(reinstall) == 1
    assert "--reinstall" in reinstall[0]
    assert reinstall[0][-1] == "docker.io"
    assert "reinstalled docker.io (left half-installed)" in module.warnings[0]


def test_a_package_that_stays_broken_is_named(tmp_path: Path) -> None:
    mess = "The following packages are in a mess due to serious problems during\n docker.io\n"
    script = Script([(("dpkg", "--audit"), 0, mess), (("dpkg-query", "-W"), 0, "iHR docker.io\n")])
    with pytest.raises(_Failed) as failed:
        _ready(tmp_path, FakeModule(update="never"), script).main()
    assert "Packages left half-installed: docker.io." in failed.value.result["msg"]
