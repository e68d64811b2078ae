#!/usr/bin/env python3
"""Benchmark: `gpu-compat resolve --gpu "Tesla K40m"` against a bare `python3 -c pass`.

In two environments side by side: the project's editable venv (this interpreter) and a plain
venv made for the run, where gpuprov is installed as users install it (`pip install .` of a
copy of the tree, not editable; `--no-plain` skips it, e.g. offline). All four commands run
interleaved in one process tree, N times each, with the caches warm (the first, cold run is
reported separately). Prints the medians and, per environment, their ratio; the goal (issue 2,
and issue 19 for the plain install) is a ratio of at most 2.0. No assertion: this is a
measurement, not a test.
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

ROOT = Path(__file__).resolve().parents[1]
# What `pip install .` builds gpuprov from (pyproject.toml: the package, its data, the readme).
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "bin", "compat")


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


def _plain_venv(tmp: Path) -> Path | None:
    """A new venv with gpuprov from `pip install .` (PyPI for the build and the dependencies),
    or None, saying why, when pip fails. pip builds in the source tree: it gets a copy."""
    src = tmp / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *BUILD_INPUTS],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    proc = subprocess.run([*pip, str(src)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        print(
            f"plain venv skipped: pip install . failed: {lines[-1] if lines else proc.returncode}"
        )
        return None
    return venv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30)
    parser.add_argument("--no-plain", action="store_true", help="only the editable venv")
    args = parser.parse_args()
    # An installed package has its bytecode compiled (pip does it); an editable checkout
    # under PYTHONDONTWRITEBYTECODE=1 would recompile compat on every run.
    import compat

    compileall.compile_dir(str(Path(compat.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        envs = {"editable venv": Path(sys.executable).parent}
        if not args.no_plain:
            print("making a plain venv (pip install .) ...", flush=True)
            plain = _plain_venv(Path(tmp))
            if plain is not None:
                envs["plain venv"] = plain / "bin"
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        env.pop("GPU_COMPAT_NO_CACHE", None)
        cmds = {
            name: (
                [str(bindir / "python"), "-c", "pass"],
                [str(bindir / "gpu-compat"), "resolve", "--gpu", "Tesla K40m"],
            )
            for name, bindir in envs.items()
        }
        cold = {name: _time(resolve, env) for name, (_, resolve) in cmds.items()}
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in cmds}
        for _ in range(args.runs):
            for name, (bare, resolve) in cmds.items():
                times[name][0].append(_time(bare, env))
                times[name][1].append(_time(resolve, env))
        ins = {
            name: (_instructions(bare, env), _instructions(r, env))
            for name, (bare, r) in cmds.items()
        }
    print(f"runs each: {args.runs}; gpu-compat resolve --gpu 'Tesla K40m' / python -c pass")
    print(f"{'':34}" + "".join(f"{name:>16}" for name in cmds))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:34}" + "".join(f"{c:>16}" for c in cells))

    med = {name: (statistics.median(b), statistics.median(r)) for name, (b, r) in times.items()}
    row("python -c pass (median)", [f"{b * 1000:.1f} ms" for b, _ in med.values()])
    row("gpu-compat resolve (median)", [f"{r * 1000:.1f} ms" for _, r in med.values()])
    row("gpu-compat resolve, cold cache", [f"{c * 1000:.1f} ms" for c in cold.values()])
    row("ratio (goal <= 2.0)", [f"{r / b:.2f}" for b, r in med.values()])
    counted = {name: (b, r) for name, (b, r) in ins.items() if b and r}
    if len(counted) == len(ins):  # valgrind ran for every command
        row(
            "instructions (millions)",
            [f"{r / 1e6:.0f} / {b / 1e6:.0f}" for b, r in counted.values()],
        )
        row("instruction ratio", [f"{r / b:.2f}" for b, r in counted.values()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
