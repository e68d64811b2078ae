"""apt_ready against a real apt-get: the texts it explains are apt's own, not typed by us.

Throwaway file:/ repositories (a Release dated in the future, one expired, one signed by a
key the source's keyring does not hold, one signed by an expired key) signed with throwaway
gpg keys, and a throwaway APT configuration: APT_CONFIG names a file that replaces apt.conf
and apt.conf.d (so the host's settings, e.g. `Acquire::Check-Date "false"` in a container
image, do not apply), and every directory apt reads sources or keys from or writes to is
under the test's tmp directory. The host's own apt state is neither read nor written.
Needs apt-get and gpg (Debian; `scripts/prereqs.sh test` installs gnupg); about a second.
"""

from __future__ import annotations

import email.utils
import getpass
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apt_ready  # plugins/modules/apt_ready.py (on pytest's pythonpath)
import pytest
from apt_fakes import Failed, FakeModule

pytestmark = pytest.mark.skipif(
    not (shutil.which("apt-get") and shutil.which("gpg")), reason="needs apt-get and gpg (Debian)"
)

DAY = 86400
KEY_UIDS = {"a": "gpuprov test a <a@x.invalid>", "b": "gpuprov test b <b@x.invalid>"}
EXPIRED_UID = "gpuprov test expired <c@x.invalid>"


def _gpg(home: Path, *args: str, faked: int | None = None) -> str:
    argv = ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
    if faked is not None:
        argv += ["--faked-system-time", str(faked)]
    env = dict(os.environ, GNUPGHOME=str(home), LC_ALL="C")
    return subprocess.run(
        [*argv, *args], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def _release(dist: Path, date: float, valid_until: float | None = None) -> None:
    (dist / "Packages").write_bytes(b"")
    lines = ["Origin: gpuprov-test", f"Date: {email.utils.formatdate(date, usegmt=True)}"]
    if valid_until is not None:
        lines.append(f"Valid-Until: {email.utils.formatdate(valid_until, usegmt=True)}")
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    lines += ["SHA256:", f" {empty} 0 Packages"]
    (dist / "Release").write_text("\n".join(lines) + "\n")


class Repos:
    """The throwaway keys and repositories, built once for this module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        now = time.time()
        # A short GNUPGHOME: gpg-agent's socket path must stay under ~100 characters.
        home = Path(tempfile.mkdtemp(prefix="gpuprov-gpg."))
        try:
            for uid in KEY_UIDS.values():
                _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
            born = int(now) - 2 * 365 * DAY  # made two years ago, valid for one
            _gpg(home, "--quick-gen-key", EXPIRED_UID, "ed25519", "sign", "365d", faked=born)
            self.ids = {
                name: self._key_id(home, uid)
                for name, uid in (*KEY_UIDS.items(), ("expired", EXPIRED_UID))
            }
            for name, uid in (*KEY_UIDS.items(), ("expired", EXPIRED_UID)):
                (root / f"{name}.gpg").write_bytes(
                    subprocess.run(
                        ["gpg", "--batch", "--export", uid],
                        env=dict(os.environ, GNUPGHOME=str(home)),
                        capture_output=True,
                        check=True,
                    ).stdout
                )
            plans: dict[str, tuple[float, float | None, str, int | None]] = {
                "future": (now + 730 * DAY, None, KEY_UIDS["a"], None),
                "expired": (now - 30 * DAY, now - 20 * DAY, KEY_UIDS["a"], None),
                "rotated": (now, None, KEY_UIDS["b"], None),
                "oldkey": (now - 700 * DAY, None, EXPIRED_UID, born + DAY),
                "ok": (now, None, KEY_UIDS["a"], None),
            }
            for name, (date, until, signer, faked) in plans.items():
                dist = root / name
                dist.mkdir()
                _release(dist, date, until)
                _gpg(
                    home,
                    "--local-user",
                    signer,
                    "--clearsign",
                    "-o",
                    str(dist / "InRelease"),
                    str(dist / "Release"),
                    faked=faked,
                )
        finally:
            subprocess.run(
                ["gpgconf", "--kill", "gpg-agent"],
                env=dict(os.environ, GNUPGHOME=str(home)),
                check=False,
            )
            shutil.rmtree(home, ignore_errors=True)

    @staticmethod
    def _key_id(home: Path, uid: str) -> str:
        out = _gpg(home, "--with-colons", "--list-keys", uid)
        fpr = next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))
        return fpr[-16:]  # apt names the long key id

    def uri(self, name: str) -> str:
        return f"file:{self.root / name}"


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Repos:
    return Repos(tmp_path_factory.mktemp("repos"))


class RealApt:
    """Runs apt-get and apt-cache for real with a throwaway configuration under `root`;
    anything else the module runs (dpkg, apt-mark) answers "nothing to report"."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.etc = root / "etc"
        self.lists = root / "lists"
        for d in (
            self.etc / "sources.list.d",
            self.lists / "partial",
            root / "cache",
            root / "parts",
        ):
            d.mkdir(parents=True, exist_ok=True)
        (root / "status").touch()
        self.config = root / "apt.conf"
        self.config.write_text(
            f'Dir::Etc::Main "/dev/null";\nDir::Etc::Parts "{root / "parts"}";\n'
            'Acquire::Check-Date "true";\nAcquire::Check-Valid-Until "true";\n'
        )
        self.opts = [
            f"-oDir::State={root}",
            f"-oDir::State::Lists={self.lists}",
            f"-oDir::State::status={root / 'status'}",
            f"-oDir::Cache={root / 'cache'}",
            f"-oDir::Etc::SourceList={self.etc / 'sources.list'}",
            f"-oDir::Etc::SourceParts={self.etc / 'sources.list.d'}",
            f"-oDir::Etc::Trusted={root / 'trusted.gpg'}",
            f"-oDir::Etc::TrustedParts={root / 'parts'}",
            f"-oDir::Etc::Preferences={root / 'preferences'}",
            f"-oDir::Etc::PreferencesParts={root / 'parts'}",
            "-oDebug::NoLocking=1",
            f"-oAPT::Sandbox::User={getpass.getuser()}",
        ]
        self.outputs: list[tuple[int, str, str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        if argv[0] not in ("apt-get", "apt-cache"):
            return 0, "", ""
        env = dict(os.environ, APT_CONFIG=str(self.config), **apt_ready.APT_ENV)
        proc = subprocess.run(
            [argv[0], *self.opts, *argv[1:]],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        self.outputs.append((proc.returncode, proc.stdout, proc.stderr))
        return proc.returncode, proc.stdout, proc.stderr

    def source(self, name: str, text: str) -> None:
        (self.etc / "sources.list.d" / name).write_text(text)


def _deb822(uri: str, keyring: Path) -> str:
    return f"Types: deb\nURIs: {uri}\nSuites: /\nSigned-By: {keyring}\n"


def _module(tmp_path: Path, apt: RealApt, **params: Any) -> tuple[FakeModule, Any]:
    """apt_ready on the throwaway APT root: its lists, its /etc/apt, no source digest."""
    module = FakeModule(repair=False, update="always", stamp=str(tmp_path / "stamp"), **params)
    obj = apt_ready.AptReady(module, run=apt)
    obj.apt_lists = str(apt.lists)
    obj.etc_apt = str(apt.etc)
    obj.source_globs = ()
    return module, obj


def _update(tmp_path: Path, apt: RealApt, **params: Any) -> dict[str, Any]:
    _, obj = _module(tmp_path, apt, **params)
    with pytest.raises(Failed) as failed:
        obj.main()
    assert not (tmp_path / "stamp").exists()
    return failed.value.result


def test_a_release_from_the_future(tmp_path: Path, repos: Repos) -> None:
    """The issue's first case: the same source twice makes apt add "configured multiple
    times" notes after the error; the old message quoted the last of them."""
    apt = RealApt(tmp_path / "apt")
    for name in ("a.sources", "dup.sources"):
        apt.source(name, _deb822(repos.uri("future"), repos.root / "a.gpg"))
    result = _update(tmp_path, apt, sources={"test_repo_url": repos.uri("future")})
    rc, _, err = apt.outputs[-1]
    assert rc == 100
    assert "is configured multiple times" in err.strip().splitlines()[-1]  # the old quote
    url = f"{repos.uri('future')}/InRelease"
    error = f"E: Release file for {url} is not valid yet (invalid for another 729d 23h 59min "
    assert result["apt_errors"] == [
        next(line for line in err.splitlines() if line.startswith(error))
    ]
    msg = result["msg"]
    assert "configured multiple times" not in msg
    assert f"the Release file {url} is not valid yet for another 729d 23h 59min " in msg
    assert "the host's clock says " in msg
    assert "Fix the host's time synchronisation first" in msg
    assert "That URL is set by test_repo_url." in msg
    (failed,) = result["failed_sources"]
    assert failed["kind"] == "not_valid_yet"
    written = (repos.root / "future" / "Release").read_text().splitlines()[1].split(": ", 1)[1]
    assert failed["release_date"] == apt_ready.release_time(written)  # read from lists/partial
    assert (apt.lists / "partial" / apt_ready.list_file_name(url)).is_file()


def test_an_expired_release(tmp_path: Path, repos: Repos) -> None:
    apt = RealApt(tmp_path / "apt")
    apt.source("a.sources", _deb822(repos.uri("expired"), repos.root / "a.gpg"))
    result = _update(tmp_path, apt)
    msg = result["msg"]
    assert f"the Release file {repos.uri('expired')}/InRelease expired 20d 0h 0min " in msg
    assert "Valid-Until " in msg
    assert "if that clock is ahead, fix the host's time synchronisation first" in msg
    (failed,) = result["failed_sources"]
    assert failed["kind"] == "expired"
    assert failed["release_valid_until"] is not None


def test_a_key_rotated_at_the_same_url(tmp_path: Path, repos: Repos) -> None:
    """The repository is now signed by key b; the role's keyring holds key a."""
    apt = RealApt(tmp_path / "apt")
    keyring = repos.root / "a.gpg"
    apt.source("test.sources", _deb822(repos.uri("rotated"), keyring))
    sources = {"test_repo_url": repos.uri("rotated"), "test_key_url": "http://keys.invalid/k"}
    result = _update(tmp_path, apt, sources=sources, keyrings={"test_key_url": str(keyring)})
    msg = result["msg"]
    key = repos.ids["b"]
    assert f"is signed by key {key}, which its Signed-By keyring {keyring} does not hold" in msg
    assert f"{keyring} is the role's copy of the key at http://keys.invalid/k (set by " in msg
    assert "proxy" not in msg
    assert f"NO_PUBKEY {key}" in " ".join(result["apt_errors"])
    (missing,) = result["missing_keys"]
    assert (missing["key"], missing["status"], missing["managed"]) == (key, "NO_PUBKEY", True)
    assert (missing["variable"], missing["key_variable"]) == ("test_repo_url", "test_key_url")


def test_a_keyring_with_an_expired_key(tmp_path: Path, repos: Repos) -> None:
    apt = RealApt(tmp_path / "apt")
    apt.source("test.sources", _deb822(repos.uri("oldkey"), repos.root / "expired.gpg"))
    result = _update(tmp_path, apt)
    msg = result["msg"]
    assert f"signed by key {repos.ids['expired']} ({EXPIRED_UID}), whose copy in" in msg
    assert "has expired (EXPKEYSIG)" in msg
    assert "gpuprov does not write" in msg


def test_a_signed_by_conflict_names_both_files(tmp_path: Path, repos: Repos) -> None:
    """The issue's second case: our deb822 source and a vendor's one-line .list for one URL."""
    apt = RealApt(tmp_path / "apt")
    ours, theirs = repos.root / "a.gpg", repos.root / "b.gpg"
    apt.source("nvidia-container-toolkit.sources", _deb822(repos.uri("ok"), ours))
    apt.source("nvidia-container-toolkit.list", f"deb [signed-by={theirs}] {repos.uri('ok')} /\n")
    result = _update(tmp_path, apt, sources={"test_repo_url": repos.uri("ok")})
    _, _, err = apt.outputs[-1]
    assert err.strip().splitlines()[-1] == "E: The list of sources could not be read."
    msg = result["msg"]
    parts = apt.etc / "sources.list.d"
    assert f"{parts}/nvidia-container-toolkit.list:1 (Signed-By {theirs})" in msg
    assert f"{parts}/nvidia-container-toolkit.sources:1 (Signed-By {ours})" in msg
    assert "That URI is set by test_repo_url." in msg
    (conflict,) = result["conflicts"]
    assert sorted(conflict["values"]) == sorted([str(ours), str(theirs)])


def test_a_good_repository_updates(tmp_path: Path, repos: Repos) -> None:
    """The same set-up with a valid repository: the runner itself is sound."""
    apt = RealApt(tmp_path / "apt")
    apt.source("test.sources", _deb822(repos.uri("ok"), repos.root / "a.gpg"))
    module = FakeModule(repair=False, update="always", stamp=str(tmp_path / "stamp"))
    obj = apt_ready.AptReady(module, run=apt)
    obj.source_globs = ()
    assert obj.main()["updated"] is True
    assert apt.outputs[-1][0] == 0


def test_a_rotated_key_is_reported_not_failed_with_stale_keys_report(
    tmp_path: Path, repos: Repos
) -> None:
    """stale_keys: report (the toolkit role's first update): real apt's NO_PUBKEY for the
    role's own keyring ends the module without failing, naming the key URL variable, so the
    role's repository task fetches the key again; the lists are not marked fresh."""
    apt = RealApt(tmp_path / "apt")
    keyring = repos.root / "a.gpg"
    apt.source("test.sources", _deb822(repos.uri("rotated"), keyring))
    module, obj = _module(
        tmp_path,
        apt,
        sources={"test_repo_url": repos.uri("rotated"), "test_key_url": "http://keys.invalid/k"},
        keyrings={"test_key_url": str(keyring)},
        stale_keys="report",
    )
    result = obj.main()
    assert apt.outputs[-1][0] == 100  # apt itself failed
    assert result["stale_keys"] == ["test_key_url"]
    assert result["updated"] is False
    assert not (tmp_path / "stamp").exists()
    (warning,) = module.warnings
    assert f"NO_PUBKEY {repos.ids['b']}" in warning
    assert "The role fetches the key again (test_key_url)" in warning


def test_another_roles_rotated_key_marks_its_record_stale_and_does_not_fail(
    tmp_path: Path, repos: Repos
) -> None:
    """The driver role's update (no keyrings of its own, stale_keys: fail) meets the toolkit
    repository re-signed with a new key, on a host where the toolkit role's last converge
    recorded that keyring (gpuprov_state, run for real). The driver does not write that key:
    it goes on, and the toolkit's record is marked stale, so the toolkit's next probe finds
    a difference and its own repository step fetches the key (what CI met on a kept lab)."""
    from test_gpuprov_state import StateModule  # the real module, run as a program

    keyring = repos.root / "a.gpg"
    records = tmp_path / "state"
    toolkit = StateModule(records)
    toolkit.path = records / "nvidia_container_toolkit.json"
    spec = {"paths": [str(keyring.with_suffix(".asc"))]}  # .asc and .gpg: the same key file
    assert toolkit("record", spec, role="nvidia_container_toolkit")["converged"] is True
    apt = RealApt(tmp_path / "apt")
    apt.source("toolkit.sources", _deb822(repos.uri("rotated"), keyring))
    apt.source("debian.sources", _deb822(repos.uri("ok"), keyring))
    module, obj = _module(tmp_path, apt, state_dir=str(records))
    result = obj.main()
    assert apt.outputs[-1][0] == 100  # apt failed on the rotated repository
    assert result["stale_records"] == [str(toolkit.path)]
    assert result["stale_keys"] == []
    assert not (tmp_path / "stamp").exists()  # the next apt_ready updates again
    (warning,) = module.warnings
    assert f"NO_PUBKEY {repos.ids['b']}" in warning
    assert "another gpuprov role (nvidia_container_toolkit)" in warning
    probed = toolkit("probe", spec, role="nvidia_container_toolkit")
    assert probed["converged"] is False
    (differs,) = probed["differs"]
    assert differs.startswith("marked stale by apt_ready: ")
    assert repos.ids["b"] in differs
    # Check mode marks nothing.
    toolkit("record", spec, role="nvidia_container_toolkit")
    module, obj = _module(tmp_path, apt, state_dir=str(records))
    module.check_mode = True
    assert obj.main()["stale_records"] == [str(toolkit.path)]
    assert toolkit("probe", spec, role="nvidia_container_toolkit")["converged"] is True


def test_a_rotated_key_no_role_recorded_still_fails(tmp_path: Path, repos: Repos) -> None:
    """A record that does not list the failing keyring is no owner: the update fails."""
    from test_gpuprov_state import StateModule

    keyring = repos.root / "a.gpg"
    records = tmp_path / "state"
    other = StateModule(records)
    assert other("record", {"paths": [str(repos.root / "b.gpg")]})["converged"] is True
    apt = RealApt(tmp_path / "apt")
    apt.source("toolkit.sources", _deb822(repos.uri("rotated"), keyring))
    result = _update(tmp_path, apt, state_dir=str(records))
    assert "gpuprov does not write" in result["msg"]
    assert "stale" not in json.loads(other.path.read_text(encoding="utf-8"))


def _gpg_fingerprints(key_file: Path, home: Path) -> list[str]:
    """What gpg itself says the file's keys' fingerprints are (the expected values)."""
    out = _gpg(home, "--with-colons", "--show-keys", str(key_file))
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]


def _gpg_fingerprints_of(home: Path, uid: str) -> list[str]:
    out = _gpg(home, "--with-colons", "--list-keys", uid)
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]


def test_openpgp_fingerprints_agree_with_gpg(tmp_path: Path, repos: Repos) -> None:
    """Binary (repos' ed25519 exports), and armoured with and without a header (an RSA key
    with its encryption subkey, as Docker's and NVIDIA's keys are)."""
    home = Path(tempfile.mkdtemp(prefix="gpuprov-gpg."))
    try:
        _gpg(home, "--quick-gen-key", "gpuprov rsa <r@x.invalid>", "rsa2048", "sign", "never")
        (primary,) = _gpg_fingerprints_of(home, "gpuprov rsa <r@x.invalid>")
        _gpg(home, "--quick-add-key", primary, "rsa2048", "encr", "never")
        armoured = tmp_path / "rsa.asc"
        armoured.write_text(_gpg(home, "--armor", "--export", "gpuprov rsa <r@x.invalid>"))
        headed = tmp_path / "rsa-comment.asc"  # armour headers before the blank line
        begin = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
        headed.write_text(armoured.read_text().replace(begin, begin + "Comment: gpuprov\n"))
        for key_file in (repos.root / "a.gpg", repos.root / "b.gpg", armoured, headed):
            expected = _gpg_fingerprints(key_file, home)
            assert expected, key_file
            assert apt_ready.openpgp_fingerprints(key_file.read_bytes()) == expected, key_file
        assert len(_gpg_fingerprints(armoured, home)) == 2  # the primary key and its subkey
    finally:
        subprocess.run(
            ["gpgconf", "--kill", "gpg-agent"], env=dict(os.environ, GNUPGHOME=str(home))
        )
        shutil.rmtree(home, ignore_errors=True)


def _pinned(tmp_path: Path, repos: Repos, value: str, check_mode: bool = False) -> Any:
    ring = tmp_path / "keyrings" / "test.asc"
    ring.parent.mkdir(exist_ok=True)
    ring.write_bytes((repos.root / "a.gpg").read_bytes())
    module = FakeModule(
        check_mode=check_mode,
        repair=False,
        update="never",
        sources={"test_key_url": "http://keys.invalid/k"},
        keyrings={"test_key_url": str(ring)},
        fingerprints={"test_key_url": {"variable": "test_key_fingerprint", "value": value}},
    )
    return ring, apt_ready.AptReady(module, run=lambda argv: (0, "", ""))


def test_a_pinned_fingerprint_refuses_another_key_and_removes_it(
    tmp_path: Path, repos: Repos
) -> None:
    home = Path(tempfile.mkdtemp(prefix="gpuprov-gpg."))
    try:
        (fpr_a,) = _gpg_fingerprints(repos.root / "a.gpg", home)
        (fpr_b,) = _gpg_fingerprints(repos.root / "b.gpg", home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # The pinned key, written spaced and in lower case as people copy it: accepted.
    spaced = " ".join(fpr_a[i : i + 4] for i in range(0, 40, 4)).lower()
    ring, obj = _pinned(tmp_path, repos, spaced)
    obj.main()
    assert ring.is_file()
    # Another key pinned: refused, both fingerprints named, the keyring gone.
    ring, obj = _pinned(tmp_path, repos, fpr_b)
    with pytest.raises(Failed) as failed:
        obj.main()
    msg = failed.value.result["msg"]
    assert "The signing key fetched from http://keys.invalid/k (set by test_key_url)" in msg
    assert f"holds {fpr_a}; test_key_fingerprint pins {fpr_b}" in msg
    assert not ring.exists()
    # Check mode says the same and removes nothing.
    ring, obj = _pinned(tmp_path, repos, fpr_b, check_mode=True)
    with pytest.raises(Failed):
        obj.main()
    assert ring.is_file()
    # No pin, or no keyring yet: nothing to check.
    ring, obj = _pinned(tmp_path, repos, "")
    obj.main()
    ring.unlink()
    ring, obj = _pinned(tmp_path, repos, fpr_b)
    ring.unlink()
    obj.main()
