"""The lab's stand-in toolkit repository (scripts/gpuprov_lab/aptrepo.py), built for real:
dpkg-deb, dpkg-scanpackages and gpg, in a tmp directory.

redate() is the fault suite's "Release dated in the future" (tests/lab/test_faults.py): the
Release must carry the new Date and verify with the key already published, so that apt's only
complaint is the date."""

from __future__ import annotations

import email.utils
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from gpuprov_lab import aptrepo

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("gpg", "gpgv", "dpkg-deb", "dpkg-scanpackages")),
    reason="needs gpg, gpgv and dpkg-dev (scripts/prereqs.sh test installs them)",
)


def _verifies(inrelease: Path, key: Path, tmp: Path) -> bool:
    keyring = tmp / "keyring.gpg"
    dearmored = subprocess.run(["gpg", "--dearmor"], input=key.read_bytes(), capture_output=True)
    keyring.write_bytes(dearmored.stdout)
    gpgv = ["gpgv", "--keyring", str(keyring), str(inrelease)]
    return subprocess.run(gpgv, capture_output=True, check=False).returncode == 0


def test_redate_signs_a_future_release_with_the_published_key(tmp_path: Path) -> None:
    repo, _ = aptrepo.build_signed_repo(tmp_path / "build")
    (dist,) = {p.parent for p in repo.rglob("InRelease")}
    published = (repo / "gpgkey").read_text()
    secret = repo.parent / aptrepo.SIGNING_KEY_FILE
    assert "PRIVATE KEY" in secret.read_text()
    assert secret.parent != repo  # beside the served tree, not in it
    future = time.time() + 730 * 86400

    aptrepo.redate(repo, dist, future)

    assert (repo / "gpgkey").read_text() == published  # the key stays
    date = re.search(r"^Date: (.+)$", (dist / "Release").read_text(), re.M)
    assert date, (dist / "Release").read_text()
    assert abs(email.utils.parsedate_to_datetime(date[1]).timestamp() - future) < 2
    assert f"Date: {date[1]}" in (dist / "InRelease").read_text()
    assert _verifies(dist / "InRelease", repo / "gpgkey", tmp_path)


def test_sign_without_keep_key_rotates_the_published_key(tmp_path: Path) -> None:
    repo, _ = aptrepo.build_signed_repo(tmp_path / "build")
    (dist,) = {p.parent for p in repo.rglob("InRelease")}
    before = (repo / "gpgkey").read_text()
    secret_before = (repo.parent / aptrepo.SIGNING_KEY_FILE).read_text()
    assert aptrepo.sign(repo, dist) != before
    assert (repo.parent / aptrepo.SIGNING_KEY_FILE).read_text() != secret_before
    assert _verifies(dist / "InRelease", repo / "gpgkey", tmp_path)
