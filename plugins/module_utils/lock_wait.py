# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Waiting for a flock(2) lock that another process holds, and naming who holds it.

gpuprov's background installs (the pytorch, jupyterlab, object_storage and model_serving roles'
jobs) each hold a lock file while they run; a role waits for it before it reads or writes what
the job writes. One definition of that wait, for the modules that wait: gpuprov_wait_lock (a
task that waits) and gpuprov_state (a probe that waits before it reads). Runs on managed hosts:
Python 3.9+, standard library only, no Ansible imports (AnsiballZ ships this file with the
module, as ``ansible.module_utils.lock_wait`` or from the collection).

The wait is a blocking shared lock ended by a timer: the kernel wakes it when the holder lets
go, and /proc/locks lists it as a waiter (``->``) meanwhile, which is how a test or an operator
sees that a run waits."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import time
from pathlib import Path
from types import FrameType
from typing import NamedTuple

PROC_LOCKS = "/proc/locks"


class Waited(NamedTuple):
    """What a wait found: whether the lock file exists, whether it was held when the wait
    began, the seconds waited, whether the timeout ended the wait (the lock still held), and
    who held it (``PID COMMAND``) when the wait began, or at its timeout."""

    exists: bool
    held: bool
    seconds: float
    timed_out: bool
    holders: list[str]


class _Expired(Exception):
    pass


def _expire(_signum: int, _frame: FrameType | None) -> None:
    raise _Expired


# A holder's command line in a message: its start, and no password of a URL in it (a job's
# pip may name an index as https://user:password@host/...).
COMMAND_CHARS = 200
_USERINFO = re.compile(r"://[^/@\s]+@")


def _command_of(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(gone)"
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip() or "(no command line)"
    command = _USERINFO.sub("://***@", command)
    return command if len(command) <= COMMAND_CHARS else command[: COMMAND_CHARS - 3] + "..."


def lock_pids(path: str, waiters: bool = False, locks_file: str = PROC_LOCKS) -> list[str]:
    """The PIDs in ``locks_file`` (/proc/locks) of the processes that hold a lock on ``path``
    (``waiters``: of those that wait for one). Empty when the file or /proc/locks is gone."""
    try:
        st = Path(path).stat()
        text = Path(locks_file).read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    exact: list[str] = []
    same_inode: list[str] = []
    for line in text.splitlines():
        # "6: FLOCK  ADVISORY  WRITE 24952 fe:00:2146454 0 EOF"; a waiter: "6: -> FLOCK ..."
        fields = line.split()
        blocked = fields[1:2] == ["->"]
        fields = [f for f in fields if f != "->"]  # one per level of a waiter's waiter
        if len(fields) < 6 or blocked != waiters:
            continue
        if fields[5] == want:
            exact.append(fields[4])
        elif fields[5].rpartition(":")[2] == str(st.st_ino):
            same_inode.append(fields[4])
    # btrfs: stat names a subvolume's device, /proc/locks the file system's; the inode alone.
    return exact or same_inode


def holders(path: str, locks_file: str = PROC_LOCKS) -> list[str]:
    """``PID COMMAND`` of each process that holds a lock on ``path``."""
    return [f"{pid} {_command_of(pid)}" for pid in lock_pids(path, False, locks_file)]


def wait(path: str, timeout: float) -> Waited:
    """Wait at most ``timeout`` seconds (0: do not wait) until no process holds ``path``
    exclusively; a missing file is nothing to wait for. Takes a shared lock and lets go of it
    at once: other waiters are not held up. Uses SIGALRM: call it from the main thread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Waited(False, False, 0.0, False, [])
    start = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            return Waited(True, False, 0.0, False, [])
        held_by = holders(path)
        if timeout <= 0:
            return Waited(True, True, 0.0, True, held_by)
        previous = signal.signal(signal.SIGALRM, _expire)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout)
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Expired:
            # The timer may fire just after flock returned: ask once more, without waiting.
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return Waited(True, True, time.monotonic() - start, True, holders(path) or held_by)
        finally:
            signal.signal(signal.SIGALRM, previous)
        return Waited(True, True, time.monotonic() - start, False, held_by)
    finally:
        os.close(fd)  # lets go of the shared lock


def held_by(waited: Waited) -> str:
    """Who held the lock, in words: each holder's ``PID COMMAND``."""
    return "; ".join(waited.holders) or "a process /proc/locks does not name to this host"


def timed_out_message(path: str, timeout: float, what: str, waited: Waited) -> str:
    """The failure of a wait that ran out: the lock, what holds it, and what to do."""
    return (
        f"{path} is still locked after {timeout:g} s ({what}): held by {held_by(waited)}. That"
        " process must end first (the lock goes with it): let it finish, or stop it, then run"
        " again."
    )
