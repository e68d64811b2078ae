"""Unit tests for plugins/modules/apt_ready.py (dpkg repair, honest list freshness, fetch errors).

The module's decisions are tested here with a scripted command runner standing in for
dpkg/apt (their output texts are the ones apt 2.6 prints); tests/lab/test_faults.py runs
the real thing on lab hosts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apt_ready  # plugins/modules/apt_ready.py (on pytest's pythonpath)
import pytest
from apt_fakes import CLEAN, UPDATE_OK, Failed, FakeModule, Script

MIRROR = "http://172.18.0.2:8080/stable/deb/amd64"
CONFIGURE = ("dpkg", "--force-confdef", "--force-confold", "--configure", "-a")
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


def _ready(tmp_path: Path, module: FakeModule, script: Script) -> Any:
    module.params["stamp"] = module.params["stamp"] or str(tmp_path / "stamp.json")
    obj = apt_ready.AptReady(module, run=script)
    obj.dpkg_updates = str(tmp_path / "updates")
    obj.apt_lists = str(tmp_path / "lists")
    obj.source_globs = ((str(tmp_path / "sources"), "*"),)
    obj.etc_apt = str(tmp_path / "etc")
    for d in ("updates", "lists", "sources", "etc"):
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


# The documented rule (DOCUMENTATION, "Freshness"): fresh while the last successful update is
# *younger* than valid_time, with the same digest of the source and keyring files.
VALID = 3600
STAMP_TIME = 1_000_000.0
FRESH_AT = "fresh: updated successfully {} s ago, sources unchanged"
STALE_AT = "the last successful update is {} s old (valid_time 3600)"
CHANGED = "the apt sources or keys changed since the last successful update"


@pytest.mark.parametrize(
    ("age", "fresh", "reason"),
    [
        (0, True, FRESH_AT.format(0)),
        (VALID - 1, True, FRESH_AT.format(3599)),
        (VALID - 0.5, True, FRESH_AT.format(3599)),
        (VALID, False, STALE_AT.format(3600)),
        (VALID + 1, False, STALE_AT.format(3601)),
        (-1, False, STALE_AT.format(-1)),
    ],
    ids=["age-0", "valid_time-1", "just-under", "valid_time", "valid_time+1", "clock-went-back"],
)
def test_freshness_boundary(age: float, fresh: bool, reason: str) -> None:
    stamp = {"digest": "d", "time": STAMP_TIME}
    assert apt_ready.freshness(stamp, "d", STAMP_TIME + age, VALID, True) == (fresh, reason)


@pytest.mark.parametrize(
    ("stamp", "digest", "lists", "reason"),
    [
        ({"digest": "d", "time": STAMP_TIME}, "e", True, CHANGED),
        ({"time": STAMP_TIME}, "d", True, CHANGED),
        ({}, "d", True, "no record of a successful apt-get update by gpuprov"),
        (None, "d", True, "no record of a successful apt-get update by gpuprov"),
        ({"digest": "d", "time": STAMP_TIME}, "d", False, "no package lists on the host"),
    ],
    ids=["digest-changed", "digest-missing", "empty-stamp", "no-stamp", "no-lists"],
)
def test_freshness_is_stale_at_age_0_when(
    stamp: dict[str, Any] | None, digest: str, lists: bool, reason: str
) -> None:
    assert apt_ready.freshness(stamp, digest, STAMP_TIME, VALID, lists) == (False, reason)


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
            (CONFIGURE, 0, ""),
            (("apt-mark", "hold", "nvidia-smi"), 0, "nvidia-smi set on hold.\n"),
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
    script = Script(CLEAN)
    result = _ready(tmp_path, FakeModule(update="never"), script).main()
    assert result["repaired"] is False
    assert result["changed"] is False
    assert not script.ran("dpkg", "--force-confdef")


def test_check_mode_repairs_nothing(tmp_path: Path) -> None:
    script = Script(
        [(("dpkg", "--audit"), 0, "half configured: x\n"), (("apt-mark", "showhold"), 0, "")]
    )
    module = FakeModule(check_mode=True, update="never")
    result = _ready(tmp_path, module, script).main()
    assert result["repaired"] is False
    assert not script.ran("dpkg", "--force-confdef")
    assert "would run dpkg --configure -a" in module.warnings[0]


def test_repair_refuses_when_apt_would_remove_packages(tmp_path: Path) -> None:
    script = Script(
        [
            (("dpkg", "--audit"), 0, "half installed: docker.io\n"),
            (("apt-mark", "showhold"), 0, ""),
            (CONFIGURE, 1, "dpkg: error processing package docker.io (--configure)\n"),
            (("apt-get", "-s"), 0, "Remv docker.io [26.1]\n"),
        ]
    )
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, FakeModule(update="never"), script).main()
    assert "would remove docker.io" in failed.value.result["msg"]
    assert not script.ran("apt-get", "-y")


def test_failed_update_names_the_url_and_leaves_lists_stale(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps({"digest": "old", "time": 0}))
    script = Script([*CLEAN, (("apt-get", "update"), 100, UPDATE_UNREACHABLE)])
    module = FakeModule(stamp=str(stamp), sources={"nvidia_container_toolkit_apt_repo_url": MIRROR})
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, module, script).main()
    msg = failed.value.result["msg"]
    assert f"could not fetch {MIRROR}/InRelease" in msg
    assert "set by nvidia_container_toolkit_apt_repo_url" in msg
    assert "not marked fresh" in msg
    assert not stamp.exists()


def test_successful_update_is_remembered_until_sources_change(tmp_path: Path) -> None:
    script = Script([*CLEAN, UPDATE_OK])
    obj = _ready(tmp_path, FakeModule(), script)
    assert obj.main()["updated"] is True
    assert script.calls.count(tuple(script.calls[-1])) == 1
    second = _ready(tmp_path, FakeModule(), Script(CLEAN)).main()  # no apt-get update
    assert second["updated"] is False
    assert second["update_reason"].startswith("fresh")
    (tmp_path / "sources" / "nvidia.sources").write_text("URIs: x\n")
    third = _ready(tmp_path, FakeModule(), Script([*CLEAN, UPDATE_OK])).main()
    assert third["updated"] is True
    assert "changed" in third["update_reason"]


class Clock:
    """apt_ready's `time` module with a settable time.time() (the rest is the real module)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(STAMP_TIME)
    monkeypatch.setattr(apt_ready, "time", fake)
    return fake


def _updated(tmp_path: Path, **params: Any) -> Any:
    """A successful update (update: auto, no stamp yet) at the clock's time; the module."""
    obj = _ready(tmp_path, FakeModule(**params), Script([*CLEAN, UPDATE_OK]))
    assert obj.main()["updated"] is True
    return obj


@pytest.mark.parametrize(
    ("age", "updates", "reason"),
    [
        (VALID - 1, False, FRESH_AT.format(3599)),
        (VALID, True, STALE_AT.format(3600)),
    ],
    ids=["valid_time-1-fresh", "valid_time-stale"],
)
def test_auto_update_runs_from_valid_time_on(
    tmp_path: Path, clock: Clock, age: int, updates: bool, reason: str
) -> None:
    _updated(tmp_path, valid_time=VALID)
    stamp = tmp_path / "stamp.json"
    assert json.loads(stamp.read_text())["time"] == STAMP_TIME
    clock.now = STAMP_TIME + age
    # The strict script: a fresh run that ran apt-get update would fail on the command.
    script = Script([*CLEAN, UPDATE_OK] if updates else CLEAN)
    result = _ready(tmp_path, FakeModule(valid_time=VALID), script).main()
    assert (result["updated"], result["update_reason"]) == (updates, reason)
    assert script.ran("apt-get", "update") is updates
    assert json.loads(stamp.read_text())["time"] == (clock.now if updates else STAMP_TIME)


@pytest.mark.parametrize(
    ("path", "stale"),
    [
        ("etc/apt/sources.list", True),
        ("etc/apt/sources.list.d/nvidia.list", True),
        ("etc/apt/sources.list.d/nvidia.sources", True),
        ("etc/apt/keyrings/nvidia.asc", True),
        ("etc/apt/trusted.gpg.d/old.gpg", True),
        ("usr/share/keyrings/gpuprov-nvidia.gpg", True),
        ("etc/apt/sources.list.d/nvidia.list.save", False),  # apt reads no such file
    ],
    ids=["sources.list", "list", "sources", "keyring", "trusted.gpg.d", "gpuprov-key", "save"],
)
def test_a_changed_source_or_key_file_makes_the_lists_stale(
    tmp_path: Path, clock: Clock, path: str, stale: bool
) -> None:
    root = tmp_path / "root"
    changed = root / path
    changed.parent.mkdir(parents=True)
    changed.write_bytes(b"before")
    globs = tuple((f"{root}{d}", pattern) for d, pattern in apt_ready.SOURCE_GLOBS)

    def run(script: Script) -> dict[str, Any]:
        obj = _ready(tmp_path, FakeModule(), script)
        obj.source_globs = globs  # the module's own globs, under the test's root
        result: dict[str, Any] = obj.main()
        return result

    assert run(Script([*CLEAN, UPDATE_OK]))["updated"] is True  # no stamp yet
    clock.now += 1
    changed.write_bytes(b"after")
    # The strict script: a fresh run that ran apt-get update would fail on the command.
    result = run(Script([*CLEAN, UPDATE_OK] if stale else CLEAN))
    assert (result["updated"], result["update_reason"]) == (
        (True, CHANGED) if stale else (False, FRESH_AT.format(1))
    )


@pytest.mark.parametrize(
    ("rc", "output"),
    [(100, UPDATE_UNREACHABLE), (0, UPDATE_UNREACHABLE)],
    ids=["failed", "partial-rc-0"],
)
def test_a_failed_update_removes_a_fresh_stamp(
    tmp_path: Path, clock: Clock, rc: int, output: str
) -> None:
    _updated(tmp_path)
    stamp = tmp_path / "stamp.json"
    clock.now += 1
    script = Script([*CLEAN, (("apt-get", "update"), rc, output)])
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, FakeModule(update="always"), script).main()
    assert "The package lists are not marked fresh" in failed.value.result["msg"]
    assert not stamp.exists()
    again = _ready(tmp_path, FakeModule(), Script([*CLEAN, UPDATE_OK])).main()
    assert (again["updated"], again["update_reason"]) == (
        True,
        "no record of a successful apt-get update by gpuprov",
    )


def test_the_fake_runner_refuses_an_undeclared_command() -> None:
    script = Script(CLEAN)
    assert script(["dpkg", "--audit"]) == (0, "", "")
    with pytest.raises(AssertionError, match=r"unexpected command .*\['apt-get', 'update'\]"):
        script(["apt-get", "update"])


def test_missing_package_triggers_one_refresh_then_fails(tmp_path: Path) -> None:
    fresh_stamp = tmp_path / "stamp.json"
    script = Script([*CLEAN, UPDATE_OK, (("apt-cache", "policy"), 0, POLICY)])
    obj = _ready(tmp_path, FakeModule(), Script([*CLEAN, UPDATE_OK]))
    obj.main()  # a successful update: lists fresh
    module = FakeModule(
        stamp=str(fresh_stamp),
        packages=["libnvidia-container1=1.18.0-1"],
        sources={"nvidia_container_toolkit_apt_repo_url": MIRROR},
    )
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, module, script).main()
    updates = [c for c in script.calls if c[:2] == ("apt-get", "update")]
    assert len(updates) == 1
    assert "No install candidate for libnvidia-container1" in failed.value.result["msg"]
    assert MIRROR in failed.value.result["msg"]


def test_missing_package_found_after_the_refresh(tmp_path: Path) -> None:
    _ready(tmp_path, FakeModule(), Script([*CLEAN, UPDATE_OK])).main()
    script = Script(
        [
            *CLEAN,
            UPDATE_OK,
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
            *CLEAN,
            UPDATE_OK,  # no stamp yet: the lists are refreshed first
            (("apt-cache", "policy"), 0, "x:\n  Candidate: 1.0\n"),
            (
                ("apt-get", "install"),
                100,
                "E: You don't have enough free space in /var/cache/apt/archives/.\n",
            ),
        ]
    )
    with pytest.raises(Failed) as failed:
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
            (CONFIGURE, 1, "dpkg: error processing package docker.io (--configure)\n"),
            (("apt-get", "-s", "-f", "install"), 0, "Inst docker.io (20.10.24 Debian:12/stable)\n"),
            (("apt-get", "-y"), 100, "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"),
            (("apt-get", "install", "-y", "--reinstall"), 0, "Setting up docker.io\n"),
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
    script = Script(
        [
            (("dpkg", "--audit"), 0, mess),
            (("apt-mark", "showhold"), 0, ""),
            (CONFIGURE, 1, "dpkg: error processing package docker.io (--configure)\n"),
            (("apt-get", "-s", "-f", "install"), 0, ""),
            (("apt-get", "-y"), 100, "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"),
            (("dpkg-query", "-W"), 0, "iHR docker.io\n"),
            (("apt-get", "install", "-y", "--reinstall"), 100, "E: dpkg was interrupted\n"),
        ]
    )
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, FakeModule(update="never"), script).main()
    assert "Packages left half-installed: docker.io." in failed.value.result["msg"]


# ---------------------------------------------------------------------------
# apt errors that name their cause (issue 20). The texts are apt 2.6's (bookworm), as
# tests/unit/test_apt_ready_real_apt.py sees them from a real apt-get; paths and URLs are
# those of the hosts where the issue was seen.

DEBIAN_INRELEASE = "http://deb.debian.org/debian/dists/bookworm/InRelease"
NOT_VALID_YET = f"""\
Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]
Reading package lists...
E: Release file for {DEBIAN_INRELEASE} is not valid yet (invalid for another 729d 23h 59min \
49s). Updates for this repository will not be applied.
W: Target Packages (contrib/binary-amd64/Packages) is configured multiple times in \
/etc/apt/sources.list.d/debian.sources:1 and \
/etc/apt/sources.list.d/gpuprov-debian-nonfree.sources:1
W: Target Translations (contrib/i18n/Translation-en) is configured multiple times in \
/etc/apt/sources.list.d/debian.sources:1 and \
/etc/apt/sources.list.d/gpuprov-debian-nonfree.sources:1
"""
EXPIRED = (
    f"E: Release file for {DEBIAN_INRELEASE} is expired (invalid since 20d 0h 0min 1s). "
    "Updates for this repository will not be applied.\n"
)
NVIDIA = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64"
NVIDIA_VAR = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
NVIDIA_KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
OUR_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
THEIR_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
NO_PUBKEY = f"""\
Get:1 {NVIDIA}  InRelease [1477 B]
Err:1 {NVIDIA}  InRelease
  The following signatures couldn't be verified because the public key is not available: \
NO_PUBKEY DDCAE044F796ECB0
Reading package lists...
W: GPG error: {NVIDIA}  InRelease: The following signatures couldn't be verified because the \
public key is not available: NO_PUBKEY DDCAE044F796ECB0
E: The repository '{NVIDIA}  InRelease' is not signed.
"""
EXPKEYSIG = (
    f"W: GPG error: {NVIDIA}  InRelease: The following signatures were invalid: EXPKEYSIG "
    "C2AC96DF4734880A key c <c@x.invalid>\n"
    f"E: The repository '{NVIDIA}  InRelease' is not signed.\n"
)
SIGNED_BY_CONFLICT = f"""\
E: Conflicting values set for option Signed-By regarding source {NVIDIA}/ /: \
{OUR_KEYRING} != {THEIR_KEYRING}
E: The list of sources could not be read.
"""
OUR_SOURCES = f"""\
X-Repolib-Name: nvidia-container-toolkit
Types: deb
URIs: {NVIDIA_VAR}
Suites: /
Signed-By: {OUR_KEYRING}
"""
THEIR_LIST = f"deb [signed-by={THEIR_KEYRING}] {NVIDIA_VAR} /\n"
TOOLKIT_SOURCES = {
    "nvidia_container_toolkit_apt_repo_url": NVIDIA_VAR,
    "nvidia_container_toolkit_apt_gpg_key_url": NVIDIA_KEY_URL,
}
TOOLKIT_KEYRINGS = {"nvidia_container_toolkit_apt_gpg_key_url": OUR_KEYRING}
NOW = 1796200000.0  # 2026-12-02 08:26:40 UTC


def test_cause_lines_are_the_errors_and_never_a_note() -> None:
    """The issue's first case: the old message quoted the last W: line (a harmless
    "configured multiple times" note); the cause is the E: line."""
    assert apt_ready.cause_lines(NOT_VALID_YET) == [NOT_VALID_YET.splitlines()[2]]


def test_cause_lines_keep_warnings_that_report_the_failure() -> None:
    assert apt_ready.cause_lines(NO_PUBKEY + NO_PUBKEY) == NO_PUBKEY.splitlines()[-2:]


def test_fetch_errors_leave_signatures_out() -> None:
    """apt lists a signature it cannot verify as `Err:`; it was fetched: no mirror/proxy hint."""
    assert apt_ready.fetch_errors(NO_PUBKEY) == []
    assert apt_ready.fetch_errors(f"W: Failed to fetch {NVIDIA}/InRelease  NO_PUBKEY AB\n") == []


@pytest.mark.parametrize(
    ("text", "kind", "span"),
    [
        (NOT_VALID_YET, "not valid yet", "729d 23h 59min 49s"),
        (EXPIRED, "expired", "20d 0h 0min 1s"),
    ],
    ids=["not-valid-yet", "expired"],
)
def test_clock_errors(text: str, kind: str, span: str) -> None:
    assert apt_ready.clock_errors(text + text) == [
        apt_ready.ClockError(DEBIAN_INRELEASE, kind, span)
    ]


def test_signature_errors_name_every_key_and_its_status() -> None:
    assert apt_ready.signature_errors(NO_PUBKEY) == [
        apt_ready.SignatureError(NVIDIA, "NO_PUBKEY", "DDCAE044F796ECB0")
    ]
    assert apt_ready.signature_errors(EXPKEYSIG) == [
        apt_ready.SignatureError(NVIDIA, "EXPKEYSIG", "C2AC96DF4734880A", "key c <c@x.invalid>")
    ]
    two = (
        "W: GPG error: http://deb.debian.org/debian bookworm InRelease: The following signatures "
        "couldn't be verified because the public key is not available: NO_PUBKEY 0E98404D386FA1D9"
        " NO_PUBKEY 6ED0E7B82643E131\n"
    )
    assert [e.key for e in apt_ready.signature_errors(two)] == [
        "0E98404D386FA1D9",
        "6ED0E7B82643E131",
    ]
    assert {e.url for e in apt_ready.signature_errors(two)} == {"http://deb.debian.org/debian"}


def test_conflicts_read_the_option_source_and_both_values() -> None:
    assert apt_ready.conflicts(SIGNED_BY_CONFLICT) == [
        apt_ready.Conflict("Signed-By", f"{NVIDIA}/", "/", (OUR_KEYRING, THEIR_KEYRING))
    ]
    # a definition without signed-by: apt prints an empty value
    text = (
        f"E: Conflicting values set for option Signed-By regarding source {NVIDIA}/ /: /k.gpg != \n"
    )
    assert apt_ready.conflicts(text)[0].values == ("/k.gpg", "")


def test_parse_one_line_reads_options_and_skips_comments() -> None:
    text = (
        "# deb http://disabled.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm main # note\n"
        "deb-src [ signed-by=/k.gpg ] http://a.example/debian bookworm main\n"
        "deb http://b.example/debian\n"  # no suite: apt refuses it; not a definition
        "\n"
        "deb\thttp://c.example/ /\n"
    )
    found = apt_ready.parse_one_line(text, "/etc/apt/sources.list")
    assert [(d.line, d.types, d.uri, d.suites, d.signed_by) for d in found] == [
        (2, ("deb",), "http://a.example/debian", ("bookworm",), "/k.gpg"),
        (3, ("deb-src",), "http://a.example/debian", ("bookworm",), "/k.gpg"),
        (6, ("deb",), "http://c.example/", ("/",), ""),
    ]


def test_parse_deb822_reads_each_enabled_stanza_and_uri() -> None:
    text = (
        "# Managed by someone\n"
        "Types: deb deb-src\n"
        "URIs: http://a.example/debian http://b.example/debian\n"
        "# a comment inside a stanza\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://off.example/\n"
        "Suites: /\n"
        "Enabled: no\n"
        "\n"
        "\n"
        "Types: deb\n"
        "URIs: http://inline.example/\n"
        "Suites: /\n"
        "Signed-By:\n"
        " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
        " .\n"
        " mQINBF...\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    found = apt_ready.parse_deb822(text, "/etc/apt/sources.list.d/x.sources")
    assert [(d.line, d.types, d.uri, d.suites, d.signed_by) for d in found] == [
        (
            2,
            ("deb", "deb-src"),
            "http://a.example/debian",
            ("bookworm", "bookworm-updates"),
            "/usr/share/keyrings/debian-archive-keyring.gpg",
        ),
        (
            2,
            ("deb", "deb-src"),
            "http://b.example/debian",
            ("bookworm", "bookworm-updates"),
            "/usr/share/keyrings/debian-archive-keyring.gpg",
        ),
        (15, ("deb",), "http://inline.example/", ("/",), "(a key embedded in the file)"),
    ]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (NVIDIA_VAR, f"{NVIDIA}/", True),
        (f"{NVIDIA}/", NVIDIA_VAR, True),
        (NVIDIA_VAR, NVIDIA_VAR, True),
        ("http://deb.debian.org/debian/", "http://deb.debian.org/debian", True),
        (NVIDIA_VAR, "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/x", False),
        ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security", False),
    ],
    ids=["arch-in-var", "arch-in-apt", "both-arch", "trailing-slash", "deeper", "other"],
)
def test_same_uri(a: str, b: str, same: bool) -> None:
    assert apt_ready.same_uri(a, b) is same


def _etc(tmp_path: Path, files: dict[str, str]) -> Path:
    etc = tmp_path / "etc"
    (etc / "sources.list.d").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (etc / name).write_text(text)
    return etc


def test_find_definitions_reads_every_source_file_in_apts_order(tmp_path: Path) -> None:
    etc = _etc(
        tmp_path,
        {
            "sources.list": f"deb {NVIDIA}/ /\n",
            "sources.list.d/nvidia-container-toolkit.sources": OUR_SOURCES,
            "sources.list.d/nvidia-container-toolkit.list": THEIR_LIST,
            "sources.list.d/old.list.save": THEIR_LIST,  # apt ignores other suffixes
            "sources.list.d/debian.sources": (
                "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
            ),
        },
    )
    found = apt_ready.find_definitions(NVIDIA_VAR, str(etc))
    assert [(Path(d.file).name, d.line, d.signed_by) for d in found] == [
        ("sources.list", 1, ""),
        ("nvidia-container-toolkit.list", 1, THEIR_KEYRING),
        ("nvidia-container-toolkit.sources", 1, OUR_KEYRING),
    ]
    assert apt_ready.find_definitions("http://nowhere.example/", str(etc)) == []
    assert apt_ready.find_definitions(NVIDIA, str(tmp_path / "missing")) == []


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (DEBIAN_INRELEASE, "deb.debian.org_debian_dists_bookworm_InRelease"),
        ("http://127.0.0.1:8799/InRelease", "127.0.0.1:8799_InRelease"),
        ("https://user:pw@mirror.example/deb_x/InRelease", "mirror.example_deb%5fx_InRelease"),
        ("file:/srv/repo/InRelease", "_srv_repo_InRelease"),
    ],
    ids=["debian", "port", "credentials-and-underscore", "file"],
)
def test_list_file_name_is_apts(url: str, name: str) -> None:
    assert apt_ready.list_file_name(url) == name


def test_release_fields_of_a_clearsigned_and_a_plain_release() -> None:
    body = "Origin: Debian\nDate: Sat, 10 Jun 2023 09:00:00 UTC\nSHA256:\n abc 1 Packages\n"
    signed = (
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n"
        + body
        + "-----BEGIN PGP SIGNATURE-----\n\nxyz\n-----END PGP SIGNATURE-----\n"
    )
    want = {"Origin": "Debian", "Date": "Sat, 10 Jun 2023 09:00:00 UTC", "SHA256": ""}
    assert apt_ready.release_fields(signed) == want
    assert apt_ready.release_fields(body) == want
    assert apt_ready.release_time("Fri, 01 Dec 2028 06:40:43 +0000") == "2028-12-01 06:40:43 UTC"
    assert apt_ready.release_time("soon") == "soon"


def test_explain_clock_names_both_clocks_and_time_sync_first() -> None:
    error = apt_ready.clock_errors(NOT_VALID_YET)[0]
    release = {"Date": "Fri, 01 Dec 2028 06:40:43 UTC"}
    assert apt_ready.explain_clock(error, NOW, release, {}) == (
        f"the Release file {DEBIAN_INRELEASE} is not valid yet for another 729d 23h 59min 49s"
        " (its Date 2028-12-01 06:40:43 UTC) and the host's clock says 2026-12-02 "
        "08:26:40 UTC: the host's clock is behind (or the mirror's ahead). Fix the host's "
        "time synchronisation first (`timedatectl`; systemd-timesyncd or chrony with a reachable "
        "NTP server), then re-run; another mirror or proxy will not help. That URL is from the "
        "host's own apt sources (/etc/apt/sources.list*)."
    )


def test_explain_signature_of_a_keyring_the_role_writes() -> None:
    error = apt_ready.signature_errors(NO_PUBKEY)[0]
    ours = apt_ready.parse_deb822(OUR_SOURCES, "/etc/apt/sources.list.d/x.sources")
    text, info = apt_ready.explain_signature(error, ours, TOOLKIT_SOURCES, TOOLKIT_KEYRINGS)
    assert text == (
        f"the Release of {NVIDIA} (set by nvidia_container_toolkit_apt_repo_url) is signed by key "
        f"DDCAE044F796ECB0, which its Signed-By keyring {OUR_KEYRING} does not hold (NO_PUBKEY): "
        "the repository's signing key changed (rotated), or the keyring holds another key. "
        f"{OUR_KEYRING} is the role's copy of the key at {NVIDIA_KEY_URL} (set by "
        "nvidia_container_toolkit_apt_gpg_key_url): fetch it again from there (the role's "
        "repository step does) and check that this URL serves the key that signs the "
        "repository now."
    )
    assert info == {
        "key": "DDCAE044F796ECB0",
        "status": "NO_PUBKEY",
        "who": "",
        "url": NVIDIA,
        "variable": "nvidia_container_toolkit_apt_repo_url",
        "keyrings": [OUR_KEYRING],
        "managed": True,
        "key_variable": "nvidia_container_toolkit_apt_gpg_key_url",
        "key_url": NVIDIA_KEY_URL,
        "definitions": [ours[0].as_dict()],
    }
    # deb822_repository names the file .gpg for a binary key: the same keyring
    gpg = {"nvidia_container_toolkit_apt_gpg_key_url": OUR_KEYRING[:-4] + ".gpg"}
    assert apt_ready.explain_signature(error, ours, TOOLKIT_SOURCES, gpg)[1]["managed"] is True


def test_explain_signature_of_a_keyring_someone_else_wrote() -> None:
    error = apt_ready.signature_errors(EXPKEYSIG)[0]
    theirs = apt_ready.parse_one_line(THEIR_LIST, "/etc/apt/sources.list.d/n.list")
    text, info = apt_ready.explain_signature(error, theirs, {}, TOOLKIT_KEYRINGS)
    assert "signed by key C2AC96DF4734880A (key c <c@x.invalid>), whose copy in" in text
    assert "has expired (EXPKEYSIG)" in text
    assert f"gpuprov does not write {THEIR_KEYRING} (the source is defined at " in text
    assert "/etc/apt/sources.list.d/n.list:1" in text
    assert info["managed"] is False
    assert info["key_variable"] is None
    none, _ = apt_ready.explain_signature(error, [], {}, {})
    assert "no Signed-By: /etc/apt/trusted.gpg.d" in none


def test_explain_conflict_names_every_file_that_defines_the_uri() -> None:
    conflict = apt_ready.conflicts(SIGNED_BY_CONFLICT)[0]
    defs = apt_ready.parse_sources(
        [
            ("/etc/apt/sources.list.d/nvidia-container-toolkit.list", THEIR_LIST),
            ("/etc/apt/sources.list.d/nvidia-container-toolkit.sources", OUR_SOURCES),
        ]
    )
    assert apt_ready.explain_conflict(conflict, defs, TOOLKIT_SOURCES) == (
        f"apt cannot read its sources: {NVIDIA}/ (suite /) is defined with different Signed-By "
        f"({OUR_KEYRING} != {THEIR_KEYRING}) in 2 places: "
        f"/etc/apt/sources.list.d/nvidia-container-toolkit.list:1 (Signed-By {THEIR_KEYRING}); "
        f"/etc/apt/sources.list.d/nvidia-container-toolkit.sources:1 (Signed-By {OUR_KEYRING}). "
        "That URI is set by nvidia_container_toolkit_apt_repo_url. Keep one definition (remove "
        "or disable the others, e.g. a file a vendor's install guide added) or give them the "
        "same Signed-By; until then every apt command on this host fails."
    )
    assert "in files gpuprov could not find" in apt_ready.explain_conflict(conflict, [], {})


# -- the module's messages and fields


def test_a_release_from_the_future_names_the_clocks_not_the_last_line(tmp_path: Path) -> None:
    module = FakeModule(repair=False, update="always")
    obj = _ready(tmp_path, module, Script([(("apt-get", "update"), 100, NOT_VALID_YET)]))
    obj.now = lambda: NOW
    partial = tmp_path / "lists" / "partial"
    partial.mkdir()
    (partial / "deb.debian.org_debian_dists_bookworm_InRelease").write_text(
        "Origin: Debian\nDate: Fri, 01 Dec 2028 06:40:43 UTC\n"
        "Valid-Until: Fri, 08 Dec 2028 06:40:43 UTC\n"
    )
    with pytest.raises(Failed) as failed:
        obj.main()
    result = failed.value.result
    assert result["msg"] == (
        "apt-get update failed (update: always): the Release file "
        f"{DEBIAN_INRELEASE} is not valid yet for another 729d 23h 59min 49s (its Date "
        "2028-12-01 06:40:43 UTC, Valid-Until 2028-12-08 06:40:43 UTC) and the host's clock says "
        "2026-12-02 08:26:40 UTC: the host's clock is behind (or the mirror's ahead). Fix the "
        "host's time synchronisation first (`timedatectl`; systemd-timesyncd or chrony with a "
        "reachable NTP server), then re-run; another mirror or proxy will not help. That URL is "
        "from the host's own apt sources (/etc/apt/sources.list*). apt said: "
        f"[{NOT_VALID_YET.splitlines()[2]}] The package lists are not marked fresh, so the next "
        "run updates them again."
    )
    assert result["failed_sources"] == [
        {
            "url": DEBIAN_INRELEASE,
            "kind": "not_valid_yet",
            "reason": "729d 23h 59min 49s",
            "variable": None,
            "host_time": "2026-12-02 08:26:40 UTC",
            "release_date": "2028-12-01 06:40:43 UTC",
            "release_valid_until": "2028-12-08 06:40:43 UTC",
        }
    ]
    assert result["apt_errors"] == [NOT_VALID_YET.splitlines()[2]]


def test_a_rotated_key_names_the_key_and_the_key_url_variable(tmp_path: Path) -> None:
    module = FakeModule(
        repair=False, update="always", sources=TOOLKIT_SOURCES, keyrings=TOOLKIT_KEYRINGS
    )
    obj = _ready(tmp_path, module, Script([(("apt-get", "update"), 100, NO_PUBKEY)]))
    _etc(tmp_path, {"sources.list.d/nvidia-container-toolkit.sources": OUR_SOURCES})
    with pytest.raises(Failed) as failed:
        obj.main()
    result = failed.value.result
    assert "is signed by key DDCAE044F796ECB0" in result["msg"]
    assert "(set by nvidia_container_toolkit_apt_gpg_key_url)" in result["msg"]
    assert "proxy" not in result["msg"]
    assert "could not fetch" not in result["msg"]
    assert [(k["key"], k["managed"], k["key_variable"]) for k in result["missing_keys"]] == [
        ("DDCAE044F796ECB0", True, "nvidia_container_toolkit_apt_gpg_key_url")
    ]
    assert result["failed_sources"] == [
        {
            "url": NVIDIA,
            "kind": "signature",
            "reason": "NO_PUBKEY DDCAE044F796ECB0",
            "variable": "nvidia_container_toolkit_apt_repo_url",
        }
    ]
    assert result["fetch_errors"] == []


def test_a_signed_by_conflict_names_both_files(tmp_path: Path) -> None:
    module = FakeModule(repair=False, update="always", sources=TOOLKIT_SOURCES)
    obj = _ready(tmp_path, module, Script([(("apt-get", "update"), 100, SIGNED_BY_CONFLICT)]))
    etc = _etc(
        tmp_path,
        {
            "sources.list.d/nvidia-container-toolkit.sources": OUR_SOURCES,
            "sources.list.d/nvidia-container-toolkit.list": THEIR_LIST,
        },
    )
    with pytest.raises(Failed) as failed:
        obj.main()
    result = failed.value.result
    for name in ("nvidia-container-toolkit.sources:1", "nvidia-container-toolkit.list:1"):
        assert f"{etc}/sources.list.d/{name}" in result["msg"]
    assert "E: The list of sources could not be read." in result["msg"]
    (conflict,) = result["conflicts"]
    assert conflict["values"] == [OUR_KEYRING, THEIR_KEYRING]
    assert conflict["variable"] == "nvidia_container_toolkit_apt_repo_url"
    assert [Path(d["file"]).name for d in conflict["definitions"]] == [
        "nvidia-container-toolkit.list",
        "nvidia-container-toolkit.sources",
    ]
    # the same definitions, before apt runs: what a role's preflight reads
    assert [
        Path(d["file"]).name
        for d in result["source_definitions"]["nvidia_container_toolkit_apt_repo_url"]
    ] == ["nvidia-container-toolkit.list", "nvidia-container-toolkit.sources"]
    assert result["source_definitions"]["nvidia_container_toolkit_apt_gpg_key_url"] == []


def test_source_definitions_are_returned_when_nothing_fails(tmp_path: Path) -> None:
    module = FakeModule(repair=False, update="never", sources=TOOLKIT_SOURCES | {"off": ""})
    obj = _ready(tmp_path, module, Script([]))
    _etc(tmp_path, {"sources.list.d/nvidia-container-toolkit.list": THEIR_LIST})
    result = obj.main()
    assert set(result["source_definitions"]) == set(TOOLKIT_SOURCES)
    (found,) = result["source_definitions"]["nvidia_container_toolkit_apt_repo_url"]
    assert found["signed_by"] == THEIR_KEYRING
    assert result["apt_errors"] == result["missing_keys"] == result["conflicts"] == []


def test_an_apt_cache_failure_is_explained(tmp_path: Path) -> None:
    """With the lists fresh, the conflict first shows in `apt-cache policy`."""
    module = FakeModule(repair=False, update="never", packages=["x"])
    obj = _ready(tmp_path, module, Script([(("apt-cache", "policy"), 100, SIGNED_BY_CONFLICT)]))
    with pytest.raises(Failed) as failed:
        obj.main()
    assert failed.value.result["msg"].startswith(
        f"apt-cache policy failed: apt cannot read its sources: {NVIDIA}/ (suite /)"
    )


def test_a_download_failure_quotes_the_errors_not_the_last_line(tmp_path: Path) -> None:
    output = (
        "E: Unable to locate package nvidia-container-toolkit-base\n"
        "E: Version '9.9' for 'x' was not found\n"
        "W: Target Packages (main) is configured multiple times in /a.list:1 and /b.list:1\n"
    )
    script = Script(
        [
            (("apt-cache", "policy"), 0, "x:\n  Candidate: 1.0\n"),
            (("apt-get", "install"), 100, output),
        ]
    )
    module = FakeModule(repair=False, update="never", packages=["x"], download=True)
    with pytest.raises(Failed) as failed:
        _ready(tmp_path, module, script).main()
    assert failed.value.result["msg"] == (
        "Downloading x failed: apt said: [E: Unable to locate package "
        "nvidia-container-toolkit-base] [E: Version '9.9' for 'x' was not found] Nothing was "
        "installed."
    )


def test_a_failure_without_an_error_line_says_so(tmp_path: Path) -> None:
    module = FakeModule(repair=False, update="always")
    obj = _ready(tmp_path, module, Script([(("apt-get", "update"), 100, "Reading lists...\n")]))
    with pytest.raises(Failed) as failed:
        obj.main()
    assert (
        "apt exited with 100 and printed no E: line (see stdout and stderr)."
        in (failed.value.result["msg"])
    )


# --- stale_keys: report (a key that rotated at its URL is fetched again by the role) ---------


def _sig(kind: str = "signature") -> dict[str, Any]:
    return {"url": "http://mirror/stable/deb/amd64", "kind": kind, "reason": "NO_PUBKEY AB12"}


def _key(
    managed: bool,
    variable: str | None = "nvidia_container_toolkit_apt_gpg_key_url",
    keyrings: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "key": "AB12",
        "status": "NO_PUBKEY",
        "managed": managed,
        "key_variable": variable,
        "keyrings": list(keyrings),
    }


TOOLKIT_RECORD = "/var/lib/gpuprov/state/nvidia_container_toolkit.json"
OWNERS = {"/etc/apt/keyrings/nvidia-container-toolkit": TOOLKIT_RECORD}


def test_keys_to_renew_names_the_key_variable_when_only_our_keyring_failed() -> None:
    fields = {"failed_sources": [_sig(), _sig()], "missing_keys": [_key(True), _key(True)]}
    assert apt_ready.keys_to_renew(fields, True, {}) == (
        ["nvidia_container_toolkit_apt_gpg_key_url"],
        [],
    )
    assert apt_ready.keys_to_renew(fields, False, {}) is None  # stale_keys: fail


def test_keys_to_renew_names_the_record_of_the_role_that_writes_the_keyring() -> None:
    theirs = _key(False, None, ("/etc/apt/keyrings/nvidia-container-toolkit.gpg",))
    fields = {"failed_sources": [_sig()], "missing_keys": [theirs]}
    # The driver role's call (stale_keys: fail) does not stop on a key it does not write.
    assert apt_ready.keys_to_renew(fields, False, OWNERS) == ([], [TOOLKIT_RECORD])
    both = {"failed_sources": [_sig(), _sig()], "missing_keys": [theirs, _key(True)]}
    assert apt_ready.keys_to_renew(both, True, OWNERS) == (
        ["nvidia_container_toolkit_apt_gpg_key_url"],
        [TOOLKIT_RECORD],
    )
    assert (
        apt_ready.recorded_keyrings(
            [
                (
                    TOOLKIT_RECORD,
                    {"spec": {"paths": ["/etc/apt/keyrings/nvidia-container-toolkit.asc"]}},
                ),
                ("/x/broken.json", {"spec": "not a spec"}),
                ("/x/empty.json", []),
            ]
        )
        == OWNERS
    )


@pytest.mark.parametrize(
    "fields",
    [
        # a keyring no gpuprov role recorded: someone else's key, not ours to fetch
        {"failed_sources": [_sig()], "missing_keys": [_key(False, None, ("/etc/apt/x.gpg",))]},
        # a source without Signed-By (no keyring to own)
        {"failed_sources": [_sig()], "missing_keys": [_key(False, None)]},
        # our key and a mirror that did not answer: the fetch error must stop the run
        {"failed_sources": [_sig(), _sig("fetch")], "missing_keys": [_key(True)]},
        {"failed_sources": [_sig("not_valid_yet")], "missing_keys": []},
        {"failed_sources": [], "missing_keys": []},
        {},
    ],
)
def test_keys_to_renew_is_none_when_anything_else_failed(fields: dict[str, Any]) -> None:
    assert apt_ready.keys_to_renew(fields, True, OWNERS) is None


# ---------------------------------------------------------------------------
# owned: another definition of a repository the role writes a source for (issue 20)

OWN_FILE = "sources.list.d/nvidia-container-toolkit.sources"


def _owned(tmp_path: Path, others: str) -> dict[str, Any]:
    return {
        "nvidia_container_toolkit_apt_repo_url": {
            "file": str(tmp_path / "etc" / OWN_FILE),
            "others": others,
            "variable": "nvidia_container_toolkit_apt_foreign_sources",
        }
    }


def _owning(tmp_path: Path, others: str, files: dict[str, str], **params: Any) -> Any:
    module = FakeModule(
        repair=False,
        update="never",
        sources=TOOLKIT_SOURCES,
        owned=_owned(tmp_path, others),
        backup_dir=str(tmp_path / "backups"),
        **params,
    )
    obj = _ready(tmp_path, module, Script([]))
    _etc(tmp_path, files)
    return obj, module


def test_another_definition_is_refused_naming_file_line_and_variable(tmp_path: Path) -> None:
    obj, _ = _owning(
        tmp_path, "refuse", {OWN_FILE: OUR_SOURCES, "sources.list.d/nvidia.list": THEIR_LIST}
    )
    with pytest.raises(Failed) as failed:
        obj.main()
    msg = failed.value.result["msg"]
    their = tmp_path / "etc" / "sources.list.d" / "nvidia.list"
    assert f"{NVIDIA_VAR} (nvidia_container_toolkit_apt_repo_url) is also defined in " in msg
    assert f"{their}:1 (Signed-By {THEIR_KEYRING})" in msg
    assert "Set nvidia_container_toolkit_apt_foreign_sources: replace to move that file" in msg
    assert OUR_SOURCES.split("\n", 1)[0] not in msg  # our own file is not "another"
    assert their.read_text() == THEIR_LIST
    assert not (tmp_path / "backups").exists()


def test_replace_moves_the_file_aside_keeps_a_copy_and_says_so(tmp_path: Path) -> None:
    obj, module = _owning(
        tmp_path, "replace", {OWN_FILE: OUR_SOURCES, "sources.list.d/nvidia.list": THEIR_LIST}
    )
    result = obj.main()
    their = tmp_path / "etc" / "sources.list.d" / "nvidia.list"
    backup = tmp_path / "backups" / "nvidia.list"
    assert not their.exists()
    assert backup.read_text() == THEIR_LIST
    assert result["changed"] is True
    assert result["replaced_sources"] == [
        {
            "file": str(their),
            "backup": str(backup),
            "url": NVIDIA_VAR,
            "variable": "nvidia_container_toolkit_apt_repo_url",
        }
    ]
    (said,) = result["replaced"]
    assert said.startswith("Replaced (nvidia_container_toolkit_apt_foreign_sources: replace)")
    assert module.warnings == [said]
    # What is left is ours alone.
    (left,) = result["source_definitions"]["nvidia_container_toolkit_apt_repo_url"]
    assert left["file"] == str(tmp_path / "etc" / OWN_FILE)


def test_replace_keeps_an_earlier_copy_of_the_same_name(tmp_path: Path) -> None:
    obj, _ = _owning(tmp_path, "replace", {"sources.list.d/nvidia.list": THEIR_LIST})
    (tmp_path / "backups").mkdir()
    (tmp_path / "backups" / "nvidia.list").write_text("an earlier copy\n")
    result = obj.main()
    (moved,) = result["replaced_sources"]
    assert (tmp_path / "backups" / "nvidia.list").read_text() == "an earlier copy\n"
    assert Path(moved["backup"]).read_text() == THEIR_LIST
    assert Path(moved["backup"]).name.startswith("nvidia.list.")


def test_check_mode_moves_nothing_and_does_not_refresh(tmp_path: Path) -> None:
    module = FakeModule(
        check_mode=True,
        repair=False,
        update="always",  # would run apt-get update, which the Script does not allow
        sources=TOOLKIT_SOURCES,
        owned=_owned(tmp_path, "replace"),
        backup_dir=str(tmp_path / "backups"),
    )
    obj = _ready(tmp_path, module, Script([]))
    _etc(tmp_path, {"sources.list.d/nvidia.list": THEIR_LIST})
    result = obj.main()
    assert (tmp_path / "etc" / "sources.list.d" / "nvidia.list").read_text() == THEIR_LIST
    assert not (tmp_path / "backups").exists()
    assert result["replaced"][0].startswith("Would replace")
    assert result["updated"] is False
    assert "pending" in result["update_reason"]


def test_a_file_that_defines_other_repositories_is_never_moved(tmp_path: Path) -> None:
    shared = THEIR_LIST + "deb http://deb.debian.org/debian bookworm main\n"
    obj, _ = _owning(tmp_path, "replace", {"sources.list": shared})
    with pytest.raises(Failed) as failed:
        obj.main()
    msg = failed.value.result["msg"]
    assert f"{tmp_path / 'etc' / 'sources.list'} also defines other repositories" in msg
    assert "Nothing was changed" in msg
    assert (tmp_path / "etc" / "sources.list").read_text() == shared


def test_only_our_own_file_is_no_other_definition(tmp_path: Path) -> None:
    obj, module = _owning(tmp_path, "refuse", {OWN_FILE: OUR_SOURCES})
    result = obj.main()
    assert result["replaced_sources"] == result["replaced"] == []
    assert result["changed"] is False
    assert module.warnings == []


@pytest.mark.parametrize(
    ("owned", "needs"),
    [
        ({"file": "/x", "others": "refuse"}, "needs variable"),
        ({"file": "/x", "others": "keep", "variable": "v"}, "not refuse or replace (v)"),
    ],
    ids=["incomplete", "bad-choice"],
)
def test_a_bad_owned_entry_is_named(tmp_path: Path, owned: dict[str, str], needs: str) -> None:
    module = FakeModule(
        repair=False,
        update="never",
        sources=TOOLKIT_SOURCES,
        owned={"nvidia_container_toolkit_apt_repo_url": owned},
    )
    obj = _ready(tmp_path, module, Script([]))
    with pytest.raises(Failed) as failed:
        obj.main()
    assert needs in failed.value.result["msg"]
