#!/usr/bin/env python3
"""Benchmark: `gpu-compat resolve --gpu "Tesla K40m"` against a bare `python3 -c pass`.

Both commands run interleaved in one process tree, N times each, with the matrix cache warm
(the first, cold run is reported separately). Prints the medians and their ratio; the goal in
issue 2 is a ratio of at most 2.0. No assertion: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def _instructions(cmd: list[str], env: dict[str, str]) -> int | None:
    """Instructions executed by ``cmd`` under callgrind (repeatable under load), or None."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *cmd],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    for line in proc.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30)
    args = parser.parse_args()
    exe = shutil.which("gpu-compat", path=str(Path(sys.executable).parent)) or "gpu-compat"
    python = sys.executable
    # An installed package has its bytecode compiled (pip does it); an editable checkout
    # under PYTHONDONTWRITEBYTECODE=1 would recompile compat on every run.
    import compat

    compileall.compile_dir(str(Path(compat.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        resolve = [exe, "resolve", "--gpu", "Tesla K40m"]
        cold = _time(resolve, env)
        bare: list[float] = []
        ours: list[float] = []
        for _ in range(args.runs):
            bare.append(_time([python, "-c", "pass"], env))
            ours.append(_time(resolve, env))
        ins_bare = _instructions([python, "-c", "pass"], env)
        ins_ours = _instructions(resolve, env)
    mb, mo = statistics.median(bare), statistics.median(ours)
    print(f"runs each:                         {args.runs}")
    print(f"python -c pass (median):           {mb * 1000:7.1f} ms")
    print(f"gpu-compat resolve K40m (median):  {mo * 1000:7.1f} ms")
    print(f"gpu-compat resolve, cold cache:    {cold * 1000:7.1f} ms")
    print(f"ratio (goal <= 2.0):               {mo / mb:7.2f}")
    if ins_bare and ins_ours:
        print(f"instructions (callgrind):          {ins_ours:,} / {ins_bare:,}")
        print(f"instruction ratio:                 {ins_ours / ins_bare:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
