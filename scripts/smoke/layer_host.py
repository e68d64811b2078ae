#!/usr/bin/env python3
"""Run several torch layers of the smoke test under one interpreter that imports torch once.

    layer_host.py --timeout SECONDS JOBS

JOBS is a JSON list of {"layer": "L3", "module": "l3_cuda", "argv": [...]}, run in order.
run_all.py starts it with the torch environment's interpreter for the layers that run in
that interpreter (L3, PERF, L4, L6).

Each layer still runs in its own process, as when run_all.py started one interpreter per
layer: a forked child, in its own process group, calls the layer module's main(argv) with its
stdout and stderr in files. A crash or a hang takes only that child down (after SECONDS its
whole process group is killed) and the next layer runs. A child dies with this process
(Linux PR_SET_PDEATHSIG), and SIGTERM, SIGINT or SIGHUP here kill the running child's group
first. What the children share is what this process imported before forking: torch, whose
import took 1.7 s of each layer's run on a lab host (2026-12-06). This process only imports
torch; it initialises no CUDA context, so each child initialises its own, as a fresh
interpreter would.

Prints one JSON list, one entry per job: layer, rc (negative: killed by that signal),
stdout, stderr, timed_out, seconds. Exit 0 when it could run every job, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from typing import Any

POLL_S = 0.02
# What ends layer_host early: each kills the running layer's group first (stop); a child
# takes the default action back.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def preload() -> None:
    """Import torch for the children to inherit; a host whose torch is missing or broken
    lets each layer find that out and report it itself."""
    with contextlib.suppress(Exception):  # each layer reports it, in its own words
        import torch  # noqa: F401  # imported for the forked children


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent (layer_host) dies, even by SIGKILL,
    so a layer cannot outlive the run that started it (it sits in a process group of its
    own, out of reach of a kill aimed at run_all's)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def exit_code(code: object) -> int:
    """What sys.exit(code) makes the interpreter return: None 0, an int itself, anything
    else (a message, which Python prints to stderr) 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def child(module: str, argv: list[str], out: int, err: int) -> None:
    """In the forked child: run the layer's main(argv) with stdout/stderr in the files; never
    return (os._exit, so nothing of the parent's runs again here)."""
    rc = 1
    try:
        os.setpgid(0, 0)
        die_with_parent()
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.argv = [f"{module}.py", *argv]
        rc = exit_code(importlib.import_module(module).main(argv))
    except SystemExit as exc:  # argparse's exit, or a layer's sys.exit
        rc = exit_code(exc.code)
    except BaseException:  # a crash is this layer's verdict, not ours
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


# The layer running now: a signal to layer_host (run_all's timeout, Ctrl-C of gpu-check.sh)
# ends it with its process group first.
RUNNING: dict[str, int] = {}


def stop(signum: int, _frame: object) -> None:
    pid = RUNNING.get("pid")
    if pid:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    os._exit(128 + signum)


def wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code (negative: the signal that ended it) and whether it ran over
    ``timeout`` (then its process group was killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), True
        time.sleep(POLL_S)


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Fork, run one layer in the child, collect what it printed."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(
                str(job["module"]),
                [str(a) for a in job.get("argv", [])],
                out.fileno(),
                err.fileno(),
            )
        # The child's group now, whoever of the two runs first: a kill of the group at the
        # timeout must not miss a child that has not called setpgid yet.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        RUNNING["pid"] = pid
        try:
            rc, timed_out = wait(pid, timeout)
        finally:
            RUNNING.pop("pid", None)
        texts = []
        for handle in (out, err):
            handle.seek(0)
            texts.append(handle.read().decode(errors="replace"))
    return {
        "layer": job["layer"],
        "rc": rc,
        "stdout": texts[0],
        "stderr": texts[1],
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuprov smoke: torch layers, torch imported once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per layer")
    parser.add_argument("jobs", help='JSON: [{"layer": ..., "module": ..., "argv": [...]}, ...]')
    a = parser.parse_args(argv)
    try:
        jobs = json.loads(a.jobs)
    except ValueError as exc:
        parser.error(f"JOBS: {exc}")
    if not isinstance(jobs, list) or not all(
        isinstance(j, dict) and j.get("layer") and j.get("module") for j in jobs
    ):
        parser.error("JOBS: not a list of objects with layer and module")
    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    preload()
    results = [run_job(job, a.timeout) for job in jobs]
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
