"""The wait for a background install's lock (plugins/module_utils/lock_wait.py), as the
gpuprov_wait_lock module and gpuprov_state's wait_locks run it: against real flock(2) locks
held by another process, and /proc/locks as the kernel writes it. Nothing is simulated but
the contents of /proc/locks in the parser's own test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gpuprov_wait_lock  # plugins/modules/gpuprov_wait_lock.py (pytest's pythonpath)
import lock_wait  # plugins/module_utils/lock_wait.py
import pytest
from module_run import _BOOT, MODULE_UTILS, run_module

WAIT = Path(gpuprov_wait_lock.__file__)
# The module, not the filter plugin of the same name that pytest's pythonpath finds first.
STATE = Path(gpuprov_wait_lock.__file__).with_name("gpuprov_state.py")
WHAT = "the background install of torch"

# Holds an exclusive flock on argv[1] (as the background jobs' flock(1) does), says so, and
# lets go when its stdin closes, writing the time it let go to argv[2].
HOLDER = """
import fcntl, sys, time
fh = open(sys.argv[1])
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
open(sys.argv[2], "w").write(repr(time.time()))
fh.close()
"""


class Holder:
    def __init__(self, lock: Path, released: Path) -> None:
        self.released = released
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(lock), str(released)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "held\n"

    def let_go(self) -> float:
        """Let go of the lock; the time the holder did."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        return float(self.released.read_text())


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    path = tmp_path / "pip.lock"
    path.write_text("")
    return path


@pytest.fixture
def holder(lock: Path, tmp_path: Path) -> Iterator[Holder]:
    held = Holder(lock, tmp_path / "released")
    yield held
    held.proc.kill()
    held.proc.wait()
    for stream in (held.proc.stdin, held.proc.stdout):
        if stream is not None:
            stream.close()


def _start(module: Path, args: dict[str, Any]) -> subprocess.Popen[str]:
    """A module run in the background, as run_module runs one."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _BOOT, str(MODULE_UTILS), str(module)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc.stdin.close()
    return proc


def _waiting(lock: Path, proc: subprocess.Popen[str]) -> list[str]:
    """The PIDs /proc/locks lists as waiting for ``lock``, once ``proc`` waits (10 s at most)."""
    for _ in range(200):
        waiters = lock_wait.lock_pids(str(lock), waiters=True)
        if waiters or proc.poll() is not None:
            return waiters
        time.sleep(0.05)
    return []


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    proc.stdout.close()
    proc.stderr.close()
    assert out, err
    result: dict[str, Any] = json.loads(out)
    return result


def test_a_missing_lock_file_is_nothing_to_wait_for(tmp_path: Path) -> None:
    result = run_module(WAIT, {"path": str(tmp_path / "none.lock"), "timeout": 3600})
    assert (result["exists"], result["held"], result["changed"]) == (False, False, False)


def test_a_free_lock_is_not_waited_for(lock: Path) -> None:
    result = run_module(WAIT, {"path": str(lock), "timeout": 3600})
    assert (result["exists"], result["held"], result["holders"]) == (True, False, [])


def test_the_wait_ends_when_the_holder_lets_go_and_names_the_holder(
    lock: Path, holder: Holder
) -> None:
    """The module waits as a waiter the kernel lists in /proc/locks (what the lab tests and an
    operator look for), and returns only after the holder let go."""
    proc = _start(WAIT, {"path": str(lock), "timeout": 3600, "what": WHAT})
    assert _waiting(lock, proc) == [str(proc.pid)]
    holder.let_go()
    result = _result(proc)
    assert proc.returncode == 0, result
    assert result["held"], result
    assert not result.get("failed"), result
    assert [h.split()[0] for h in result["holders"]] == [str(holder.proc.pid)]
    assert "import fcntl" in result["holders"][0]  # the holder's command line


def test_a_timeout_fails_naming_the_lock_what_holds_it_and_its_process(
    lock: Path, holder: Holder
) -> None:
    result = run_module(WAIT, {"path": str(lock), "timeout": 1, "what": WHAT})
    assert result["failed"], result
    assert result["held"], result
    assert str(lock) in result["msg"]
    assert WHAT in result["msg"]
    assert f"held by {holder.proc.pid} " in result["msg"]
    assert holder.proc.poll() is None  # the holder is left alone


def test_check_mode_does_not_wait_and_says_the_lock_is_held(lock: Path, holder: Holder) -> None:
    args = {"path": str(lock), "timeout": 3600, "_ansible_check_mode": True}
    result = run_module(WAIT, args, timeout=30)  # a wait would outlast this
    assert result["held"], result
    assert not result.get("failed"), result
    assert result["waited"] == 0


def _probe(tmp_path: Path, lock: Path | None, **extra: Any) -> dict[str, Any]:
    entry = {"path": str(lock) if lock else None, "timeout": 3600, "what": WHAT}
    return {
        "role": "pytorch",
        "dir": str(tmp_path / "state"),
        "spec": {"paths": [str(tmp_path / "venv")]},
        "wait_locks": [entry],
        **extra,
    }


def test_the_probe_waits_for_the_lock_before_it_reads(
    tmp_path: Path, lock: Path, holder: Holder
) -> None:
    """Recorded while the job had not yet written the environment, probed while it does: the
    probe waits for the job, then reads what the job wrote (a difference), not the half-done
    environment it would have read before."""
    venv = tmp_path / "venv"
    record = run_module(STATE, {**_probe(tmp_path, None), "state": "record"})
    assert record["converged"], record
    proc = _start(STATE, _probe(tmp_path, lock))
    assert _waiting(lock, proc) == [str(proc.pid)]
    venv.mkdir()  # the job's write, before it lets go
    holder.let_go()
    result = _result(proc)
    assert not result["converged"], result
    [differs] = result["differs"]
    assert differs.startswith(f"path {venv}: absent -> directory "), differs


def test_the_probe_under_check_does_not_wait_and_reports_the_install_under_way(
    tmp_path: Path, lock: Path, holder: Holder
) -> None:
    run_module(STATE, {**_probe(tmp_path, None), "state": "record"})
    result = run_module(STATE, {**_probe(tmp_path, lock), "_ansible_check_mode": True}, 30)
    assert not result["converged"], result
    [differs] = result["differs"]  # the record matches otherwise
    assert differs.startswith(f"{lock} is held by {holder.proc.pid} "), differs
    assert differs.endswith(f": {WHAT} is under way"), differs


def test_the_probe_fails_when_the_wait_runs_out_and_a_null_lock_is_no_wait(
    tmp_path: Path, lock: Path, holder: Holder
) -> None:
    run_module(STATE, {**_probe(tmp_path, None), "state": "record"})
    assert run_module(STATE, _probe(tmp_path, None))["converged"]  # no lock: no wait
    args = _probe(tmp_path, lock)
    args["wait_locks"][0]["timeout"] = 1
    result = run_module(STATE, args)
    assert result["failed"], result
    assert (
        f"{lock} is still locked after 1 s ({WHAT}): held by {holder.proc.pid} " in (result["msg"])
    )


def test_proc_locks_lines_are_told_apart_by_file_and_by_holder_or_waiter(
    tmp_path: Path, lock: Path
) -> None:
    """/proc/locks as the kernel writes it (fs/locks.c: a waiter's line has "->"), for this
    file's device and inode and for another file's."""
    st = lock.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: FLOCK  ADVISORY  WRITE 4242 {dev}:{st.st_ino} 0 EOF\n"
        f"1: -> FLOCK  ADVISORY  READ 4343 {dev}:{st.st_ino} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 4444 {dev}:{st.st_ino + 1} 0 EOF\n"
        "3: OFDLCK ADVISORY  READ -1 00:43:5 0 EOF\n"
    )
    assert lock_wait.lock_pids(str(lock), False, str(locks)) == ["4242"]
    assert lock_wait.lock_pids(str(lock), True, str(locks)) == ["4343"]
    assert lock_wait.lock_pids(str(tmp_path / "gone"), False, str(locks)) == []
    # A waiter behind a waiter ("-> ->"), and btrfs, whose stat names a subvolume's device
    # where /proc/locks names the file system's: the inode alone, when no line names both.
    locks.write_text(
        f"1: FLOCK  ADVISORY  WRITE 4242 00:2f:{st.st_ino} 0 EOF\n"
        f"1: -> -> FLOCK  ADVISORY  READ 4545 00:2f:{st.st_ino} 0 EOF\n"
    )
    assert lock_wait.lock_pids(str(lock), False, str(locks)) == ["4242"]
    assert lock_wait.lock_pids(str(lock), True, str(locks)) == ["4545"]


# A holder with a short program: the index URL lies within the first characters of its
# command line, a long argument after it.
SHORT_HOLDER = (
    "import fcntl,sys;f=open(sys.argv[2]);fcntl.flock(f,2);print('held',flush=True);"
    "sys.stdin.read()"
)


def test_a_holder_is_named_by_the_start_of_its_command_without_a_url_s_password(
    lock: Path,
) -> None:
    index = "https://builder:s3cret@pypi.example/simple"
    argv = [sys.executable, "-c", SHORT_HOLDER, index, str(lock), "x" * 300]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        [named] = lock_wait.holders(str(lock))
        assert named.startswith(f"{proc.pid} {sys.executable} -c import fcntl"), named
        assert " https://***@pypi.example/simple " in named, named
        assert "s3cret" not in named
        assert named.endswith("...")  # cut
        assert len(named) == len(str(proc.pid)) + 1 + lock_wait.COMMAND_CHARS
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def test_the_wait_leaves_no_timer_and_the_caller_s_alarm_handler_in_place(
    lock: Path, holder: Holder
) -> None:
    """In this process (the modules call it in theirs): a wait that ran out and one that did
    not wait leave SIGALRM's handler as it found it and no timer armed."""

    def mine(_signum: int, _frame: object) -> None:
        raise AssertionError("the caller's handler ran")

    before = signal.signal(signal.SIGALRM, mine)
    try:
        ran_out = lock_wait.wait(str(lock), 0.2)
        assert ran_out.timed_out, ran_out
        assert ran_out.holders[0].startswith(f"{holder.proc.pid} "), ran_out
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        holder.let_go()
        free = lock_wait.wait(str(lock), 0.2)
        assert not free.held, free
        assert signal.getsignal(signal.SIGALRM) is mine
    finally:
        signal.signal(signal.SIGALRM, before)
