#!/usr/bin/env python3
"""L5 with the fleet's launchers: the all_reduce of l5_distributed.py under torchrun and mpirun.

Runs on the first host of the launch group as the training user (the dist_launch role's
verify step, or by hand), through `gpuprov-launch`, which reads the hostfile and the
rendezvous endpoint from /etc/gpuprov/launch.json:

    gpuprov-launch torchrun -- l5_distributed.py --worker ...       (torchrun on every host)
    gpuprov-launch mpirun --per-host 1 -- PYTHON l5_distributed.py --worker ...

Each worker all_reduces with gloo (sum checked, bus bandwidth measured) and writes its
result on its own host; this host's file (rank 0 or another rank: every rank checks the
same sum) gives the verdict. A host that is down fails the launch before any rank starts,
named by gpuprov-launch; a run that hangs is killed after --timeout.

Prints {"ok": bool, "layers": [verdict, verdict]}. Exit 0 all pass, 1 a launcher failed.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

LAUNCHERS = ("torchrun", "mpirun")
HERE = Path(__file__).resolve().parent
UNREACHABLE = re.compile(r"hosts unreachable over SSH, nothing started: (.*)$", re.M)


def launch_argv(
    launcher: str,
    which: str,
    python: str,
    result: str,
    timeout: int,
    join_timeout: int,
    size_mib: int,
    iters: int,
) -> list[str]:
    """The gpuprov-launch command of one launcher (pure; unit-tested)."""
    worker = [
        str(HERE / "l5_distributed.py"),
        "--worker",
        "--result",
        result,
        "--size-mib",
        str(size_mib),
        "--iters",
        str(iters),
        "--pg-timeout",
        str(join_timeout),
    ]
    if which == "torchrun":
        return [
            launcher,
            "torchrun",
            "--timeout",
            str(timeout),
            "--join-timeout",
            str(join_timeout),
            "--run-id",
            f"gpuprov-l5-{os.getpid()}",
            "--",
            *worker,
        ]
    if which == "mpirun":
        return [
            launcher,
            "mpirun",
            "--per-host",
            "1",
            "--timeout",
            str(timeout),
            "--",
            python,
            *worker,
        ]
    raise ValueError(f"unknown launcher {which!r}; use one of {', '.join(LAUNCHERS)}")


def judge(
    which: str,
    rc: int,
    output: str,
    result: Mapping[str, Any] | None,
    elapsed: float,
    timeout: int,
    started: float | None = None,
) -> dict[str, Any]:
    """One verdict (layer L5, name distributed-<launcher>) from a launch's outcome."""
    name = f"distributed-{which}"
    details: dict[str, Any] = {"launcher": which, "rc": rc, "elapsed_s": round(elapsed, 1)}
    if result:
        details.update(result)
    down = UNREACHABLE.search(output)
    if down:
        return sl.verdict(
            "L5",
            name,
            sl.FAIL,
            f"{which}: host down: {down.group(1)}",
            details,
            "start the host or leave it out of dist_launch_hosts",
            started,
        )
    if rc == 124:
        return sl.verdict(
            "L5",
            name,
            sl.FAIL,
            f"{which}: killed after {timeout}s: " + _last_launch_line(output),
            details,
            "check that every host of the launch group is up and its ports are open",
            started,
        )
    if rc != 0 or not result:
        details["output_tail"] = output[-3000:]
        return sl.verdict(
            "L5",
            name,
            sl.FAIL,
            f"{which} failed (exit {rc} after {elapsed:.0f}s): {_last_launch_line(output)}",
            details,
            None,
            started,
        )
    gloo = result["backends"]["gloo"]
    if not gloo["sum_ok"]:
        return sl.verdict(
            "L5",
            name,
            sl.FAIL,
            f"{which}: all_reduce sum wrong: got {gloo['sum_got']}, want {gloo['sum_expected']}",
            details,
            None,
            started,
        )
    return sl.verdict(
        "L5",
        name,
        sl.PASS,
        f"{which}: all_reduce across {result['world_size']} ranks ok: gloo {gloo['size_mib']} MiB "
        f"busbw {gloo['busbw_gbs']} GB/s",
        details,
        None,
        started,
    )


def _last_launch_line(output: str) -> str:
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    ours = [x for x in lines if x.startswith("gpuprov-launch")]
    return (ours or lines or ["no output"])[-1][-400:]


def run_one(which: str, args: Any) -> dict[str, Any]:
    started = time.monotonic()
    result_path = Path(f"/tmp/gpuprov-l5-{which}-{os.getuid()}.json")  # noqa: S108  # per user
    argv = launch_argv(
        args.launcher,
        which,
        args.python,
        str(result_path),
        args.timeout,
        args.join_timeout,
        args.size_mib,
        args.iters,
    )
    rc, output, result = sl.run_for_result(argv, result_path, args.timeout + 60)
    v = judge(which, rc, output, result, time.monotonic() - started, args.timeout, started)
    v["details"]["command"] = " ".join(argv)
    return v


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L5 with torchrun and mpirun (gpuprov-launch)")
    parser.add_argument("--launcher", default="/usr/local/bin/gpuprov-launch")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--python", default="/opt/gpuprov/venv/bin/python")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--join-timeout", type=int, default=45)
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)
    layers = [run_one(w.strip(), args) for w in args.launchers.split(",") if w.strip()]
    doc = {"ok": all(v["status"] == sl.PASS for v in layers), "layers": layers}
    sl.emit(doc, args.out)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
