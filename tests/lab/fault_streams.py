"""The fault suite in two streams, on two hosts at once (issue 19: it used one core of two).

The cases of tests/lab/test_faults.py marked `second_host` change neither the lab's mirror
nor need what only the K40m host's inventory sets (its package holds). When the lab has a
second Debian 12 host with a K40m (the default lab's `mixed` host), the fault module starts
them there, in a second pytest process (`pytest NODE_IDS` with GPUPROV_FAULT_STREAM=second,
attached to the running lab), while this session runs the other cases on the K40m host. When
its turn comes here, each of them reports what it did there: passed, failed (with the second
stream's report of it) or skipped (with its reason). Without such a host they run here, on
the K40m host, after the others.

Both streams use the lab's mirror. A case that changes it (re-dated, re-signed, its packages
gone) holds `mirror_lock(exclusive=True)`; the second stream holds it shared around each of
its runs that reach the mirror (every play: apt updates all sources), a killed one included.
A case that only makes the mirror unreachable does so for its own host (a route cut there):
the other stream goes on. A turnstile lets a waiting exclusive holder in before the next
shared one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STREAM_ENV = "GPUPROV_FAULT_STREAM"  # "second" in the second stream's process
HOST_ENV = "GPUPROV_FAULT_HOST"  # the host the second stream breaks
ROWS_ENV = "GPUPROV_FAULT_ROWS"  # where the second stream writes its fault table rows
ATTACH_ENV = "GPUPROV_LAB_ATTACH"  # conftest: use the running lab (no up, no down)
MARKER = "second_host"
# Profiles of the lab's K40m hosts (scripts/lab/profiles.yaml): the cases expect the driver
# branch of a K40m (test_faults.DRIVER_PKGS).
K40M_PROFILES = ("k40m", "mixed")


def in_second_stream() -> bool:
    return os.environ.get(STREAM_ENV, "") == "second"


def second_host(hosts: dict[str, dict[str, object]], first: str) -> str | None:
    """Another Debian 12 K40m host of the lab than `first`, or None."""
    return next(
        (
            name
            for name, hv in sorted(hosts.items())
            if name != first
            and hv.get("lab_profile") in K40M_PROFILES
            and hv.get("lab_release") == "bookworm"
        ),
        None,
    )


@contextlib.contextmanager
def mirror_lock(lab_dir: Path, *, exclusive: bool) -> Iterator[None]:
    """The lab's mirror, held shared (used) or exclusively (changed), across processes."""
    lab_dir.mkdir(parents=True, exist_ok=True)
    with (
        (lab_dir / "mirror.turnstile").open("a") as turnstile,
        (lab_dir / "mirror.lock").open("a") as lock,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: str  # passed, failed, skipped
    message: str
    text: str


def read_junit(path: Path) -> dict[str, Outcome]:
    """Each test case's outcome in a pytest junit XML report, by its name."""
    found: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314  # our pytest's report
        status, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = "skipped" if child.tag == "skipped" else "failed"
                message = child.get("message", "")
                text = child.text or ""
                break
        name = case.get("name", "")
        # A failed teardown adds an <error> to a passed case: a failure wins.
        if found.get(name, Outcome("passed", "", "")).status != "failed":
            found[name] = Outcome(status, message, text)
    return found


class SecondStream:
    """The second pytest process and what it reported."""

    def __init__(self, lab_name: str, host: str, node_ids: Sequence[str], workdir: Path):
        self.host = host
        self.node_ids = frozenset(node_ids)
        workdir.mkdir(parents=True, exist_ok=True)
        self.junit = workdir / "junit.xml"
        self.rows_file = workdir / "rows.json"
        self.log_path = workdir / "output.log"
        env = {
            **os.environ,
            STREAM_ENV: "second",
            HOST_ENV: host,
            ROWS_ENV: str(self.rows_file),
            ATTACH_ENV: "1",
            "GPUPROV_LAB_NAME": lab_name,
        }
        env.pop("PYTEST_CURRENT_TEST", None)
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *node_ids,
            *("-p", "no:randomly", "-p", "no:cacheprovider"),
            f"--basetemp={workdir / 'tmp'}",
            f"--junitxml={self.junit}",
            "--durations=5",
        ]
        with self.log_path.open("w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self._outcomes: dict[str, Outcome] | None = None

    def outcome(self, name: str, timeout: float = 3600) -> Outcome:
        """What the second stream reported for test `name` (waits for it to finish)."""
        if self._outcomes is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._outcomes = read_junit(self.junit) if self.junit.exists() else {}
        got = self._outcomes.get(name)
        if got is None:
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
            return Outcome("failed", f"no report of {name} (exit {self.proc.returncode})", tail)
        return got

    def rows(self) -> list[tuple[str, str, str]]:
        if not self.rows_file.exists():
            return []
        return [(a, b, c) for a, b, c in json.loads(self.rows_file.read_text(encoding="utf-8"))]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# The running session's second stream (set by test_faults.py's module fixture).
STREAM: list[SecondStream] = []


def delegated(item: pytest.Item) -> SecondStream | None:
    """The second stream that runs `item`, if one does (set only in the first stream)."""
    return next((stream for stream in STREAM if item.nodeid in stream.node_ids), None)


def report(stream: SecondStream, item: pytest.Item) -> None:
    """Make `item`'s outcome here the second stream's: return (passed), skip or fail."""
    got = stream.outcome(item.name)
    if got.status == "skipped":
        pytest.skip(got.message)
    if got.status == "failed":
        pytest.fail(
            f"failed in the fault suite's second stream, on {stream.host} "
            f"(its output: {stream.log_path}):\n{got.message}\n{got.text}",
            pytrace=False,
        )
