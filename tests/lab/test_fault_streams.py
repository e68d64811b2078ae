"""fault_streams.py without a lab: the second pytest process and its report, the host it
picks, the mirror's lock across holders (unit run: no lab fixture)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import fault_streams
import pytest
import test_faults  # the lab module: which of its cases are marked

CASES = """
import pytest

def test_passes():
    assert True

def test_fails():
    assert 1 == 2, "one is not two"

def test_skips():
    pytest.skip("no host for it")
"""


def test_the_second_process_reports_each_case(tmp_path: Path) -> None:
    cases = tmp_path / "cases" / "test_cases.py"
    cases.parent.mkdir()
    cases.write_text(CASES, encoding="utf-8")
    ids = [f"{cases}::test_{name}" for name in ("passes", "fails", "skips")]
    stream = fault_streams.SecondStream("none", "lab-x", ids, tmp_path / "stream")
    try:
        assert stream.node_ids == set(ids)
        assert stream.outcome("test_passes").status == "passed"
        failed = stream.outcome("test_fails")
        assert failed.status == "failed"
        assert "one is not two" in failed.message + failed.text
        skipped = stream.outcome("test_skips")
        assert (skipped.status, skipped.message) == ("skipped", "no host for it")
        missing = stream.outcome("test_not_there")
        assert missing.status == "failed"
        assert "no report of test_not_there (exit 1)" in missing.message
        assert stream.rows() == []  # the cases wrote no fault table rows
    finally:
        stream.stop()


def test_a_second_host_is_another_bookworm_k40m_host() -> None:
    hosts = {
        "lab-cpu": {"lab_profile": "cpu", "lab_release": "bookworm"},
        "lab-k40m": {"lab_profile": "k40m", "lab_release": "bookworm"},
        "lab-m40": {"lab_profile": "m40", "lab_release": "trixie"},
        "lab-mixed": {"lab_profile": "mixed", "lab_release": "bookworm"},
    }
    assert fault_streams.second_host(hosts, "lab-k40m") == "lab-mixed"
    assert fault_streams.second_host(hosts, "lab-mixed") == "lab-k40m"
    del hosts["lab-mixed"]
    assert fault_streams.second_host(hosts, "lab-k40m") is None
    hosts["lab-k40m-2"] = {"lab_profile": "k40m", "lab_release": "trixie"}
    assert fault_streams.second_host(hosts, "lab-k40m") is None


def _hold(lab_dir: Path, exclusive: bool, label: str, order: list[str], done: threading.Event):
    with fault_streams.mirror_lock(lab_dir, exclusive=exclusive):
        order.append(label)
        done.wait(60)


def _wait(until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not until():
        assert time.monotonic() < deadline, "the lock holders never got there"
        time.sleep(0.01)


def _turnstile_taken(lab_dir: Path) -> bool:
    with (lab_dir / "mirror.turnstile").open("a") as turnstile:
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        return False


def test_a_change_of_the_mirror_waits_for_its_users_and_goes_before_new_ones(
    tmp_path: Path,
) -> None:
    order: list[str] = []
    release = {name: threading.Event() for name in ("used", "changed", "used-later")}
    threads = {
        name: threading.Thread(
            target=_hold, args=(tmp_path, name == "changed", name, order, release[name])
        )
        for name in release
    }
    threads["used"].start()
    _wait(lambda: order == ["used"])
    threads["changed"].start()
    _wait(lambda: _turnstile_taken(tmp_path))  # the change waits at the lock
    threads["used-later"].start()
    time.sleep(0.3)
    assert order == ["used"]  # a change waits for the mirror's user, and so does a new user
    release["used"].set()
    _wait(lambda: len(order) >= 2)
    assert order == ["used", "changed"]  # the user that came after the change waits for it
    release["changed"].set()
    _wait(lambda: len(order) >= 3)
    assert order == ["used", "changed", "used-later"]
    release["used-later"].set()
    for thread in threads.values():
        thread.join(60)


@pytest.mark.parametrize(
    ("xml", "expected"),
    [
        (
            '<testsuites><testsuite><testcase name="t"/>'
            '<testcase name="t"><error message="teardown"/></testcase></testsuite></testsuites>',
            "failed",
        ),
        ('<testsuites><testsuite><testcase name="t"/></testsuite></testsuites>', "passed"),
    ],
)
def test_a_failed_teardown_fails_a_passed_case(tmp_path: Path, xml: str, expected: str) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(xml, encoding="utf-8")
    assert fault_streams.read_junit(report)["t"].status == expected


def test_the_second_streams_cases_wait_after_the_others_and_the_table_comes_last() -> None:
    """conftest's order of the fault module (collected as `make test-lab` collects it): the
    cases the second stream may run come after the others (they wait for it), then the
    table. Without that the first stream would wait for the second before its own cases."""
    second = {
        name
        for name, fn in vars(test_faults).items()
        if any(m.name == fault_streams.MARKER for m in getattr(fn, "pytestmark", []))
    }
    assert len(second) >= 2, second
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/lab",
            "--collect-only",
            "-q",
            "-m",
            "lab",
            "-p",
            "no:randomly",
        ],
        cwd=fault_streams.REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    names = [line.split("::")[1] for line in collected if "test_faults.py::" in line]
    assert set(second) < set(names)
    kinds = ["second" if name in second else "first" for name in names[:-1]]
    assert kinds == sorted(kinds), names  # "first" < "second"
    assert names[-1] == "test_zz_print_the_fault_table"
