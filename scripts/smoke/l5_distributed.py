#!/usr/bin/env python3
"""L5 distributed: torchrun all_reduce across the hosts of a group, in bounded time.

Launcher (default): runs, under `timeout`,

    python -m torch.distributed.run --nnodes N --nproc-per-node 1 --max-restarts 0
        --rdzv-backend c10d --rdzv-endpoint MASTER:PORT --rdzv-id ID
        --rdzv-conf join_timeout=J[,is_host=true] l5_distributed.py --worker ...

on every host at once (the gpu_smoke role starts it on all hosts of the play). Each
worker all_reduces a small tensor (sum checked against N(N+1)/2) and a --size-mib
tensor (bus bandwidth reported, nccl-tests' busbw = algbw * 2(N-1)/N), with:
gloo always; nccl when every rank has a CUDA device and torch has NCCL; mpi only when
torch is built with MPI (and then it needs an mpirun launch, so it is reported skipped).

A stopped or unreachable host makes the rendezvous time out after J seconds (or the
process timeout T kills it): the verdict is a fail with that message, never a hang.

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

TIMEOUT_RCS = (124, 137)


# ---------------------------------------------------------------------------
# Worker (runs under torchrun; needs torch)


def _all_reduce_check(
    torch: Any, dist: Any, device: Any, group: Any, size_mib: int, iters: int
) -> dict[str, Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    small = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(small, group=group)
    want = world * (world + 1) / 2
    got = float(small[0].item())
    big = torch.ones(size_mib * 1024 * 1024 // 4, device=device, dtype=torch.float32)
    dist.all_reduce(big, group=group)  # warm-up, and a second sum check
    big_ok = float(big[0].item()) == float(world) and float(big[-1].item()) == float(world)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(big, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = (time.perf_counter() - t0) / iters
    nbytes = big.numel() * 4
    algbw = nbytes / elapsed / 1e9
    return {
        "sum_expected": want,
        "sum_got": got,
        "sum_ok": got == want and big_ok,
        "size_mib": size_mib,
        "iters": iters,
        "time_ms": round(elapsed * 1e3, 2),
        "algbw_gbs": round(algbw, 3),
        "busbw_gbs": round(algbw * 2 * (world - 1) / world, 3) if world > 1 else None,
    }


def worker(result: str, size_mib: int, iters: int, pg_timeout: float) -> int:
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=pg_timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = {
        "rank": rank,
        "world_size": world,
        "host": os.uname().nodename,
        "torch": str(torch.__version__),
        "backends": {},
    }
    out["backends"]["gloo"] = _all_reduce_check(
        torch, dist, torch.device("cpu"), None, size_mib, iters
    )
    # The fewest CUDA devices of any rank (a MIN all_reduce; all_gather_object needs numpy).
    fewest = torch.tensor([torch.cuda.device_count() if torch.cuda.is_available() else 0])
    dist.all_reduce(fewest, op=dist.ReduceOp.MIN)
    out["min_cuda_devices_per_rank"] = int(fewest.item())
    if not dist.is_nccl_available():
        out["backends"]["nccl"] = {"skipped": "this torch build has no NCCL"}
    elif out["min_cuda_devices_per_rank"] < 1:
        out["backends"]["nccl"] = {"skipped": "not every rank has a CUDA device"}
    else:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        group = dist.new_group(backend="nccl", timeout=timeout)
        out["backends"]["nccl"] = _all_reduce_check(
            torch, dist, torch.device("cuda", local), group, size_mib, iters
        )
    if not dist.is_mpi_available():
        out["backends"]["mpi"] = {"skipped": "this torch build has no MPI backend"}
    else:
        out["backends"]["mpi"] = {
            "skipped": "torch has MPI, but the mpi backend needs an mpirun launch, not torchrun"
        }
    dist.destroy_process_group()
    Path(result).write_text(json.dumps(out) + "\n", encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------
# Launcher (pure parts are unit-tested)


def torchrun_command(
    python: str,
    script: str,
    nnodes: int,
    master: str,
    port: int,
    run_id: str,
    join_timeout: int,
    is_host: bool,
    result: str,
    size_mib: int,
    iters: int,
    pg_timeout: int,
    timeout: int,
) -> list[str]:
    conf = f"join_timeout={join_timeout}" + (",is_host=true" if is_host else ",is_host=false")
    return [
        "timeout",
        "--kill-after=10",
        str(timeout),
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        "--nproc-per-node=1",
        "--max-restarts=0",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={master}:{port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf={conf}",
        script,
        "--worker",
        "--result",
        result,
        "--size-mib",
        str(size_mib),
        "--iters",
        str(iters),
        "--pg-timeout",
        str(pg_timeout),
    ]


_PATTERNS = (
    (
        re.compile(r"RendezvousTimeoutError|rendezvous.*timed? ?out", re.I),
        "the rendezvous timed out: not every host joined",
    ),
    (
        re.compile(
            r"RendezvousConnectionError|connect.*(refused|timed out)|Connection reset", re.I
        ),
        "cannot reach the rendezvous store on the master",
    ),
    (
        re.compile(r"(gloo|nccl).*(timeout|timed out)|Timed out waiting", re.I),
        "a collective timed out: a peer stopped mid-run",
    ),
)


_ERROR_LINE = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception))(?::\s*(.*))?$")


def root_cause(output: str) -> str:
    """The first exception line of the workers or the agent (not the agent's wrapper)."""
    for line in output.splitlines():
        text = re.sub(r"^\[rank\d+\]:\s*", "", line.strip())
        m = _ERROR_LINE.search(text)
        if m and "ChildFailedError" not in m.group(1) and not text.startswith(("File ", "raise ")):
            return text[-300:]
    tail = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return " | ".join(tail[-3:])[-300:]


def judge(
    rc: int,
    output: str,
    result: Mapping[str, Any] | None,
    nnodes: int,
    master: str,
    port: int,
    timeout: int,
    join_timeout: int,
    elapsed: float,
    started: float | None = None,
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "nnodes": nnodes,
        "master": f"{master}:{port}",
        "rc": rc,
        "elapsed_s": round(elapsed, 1),
        "timeout_s": timeout,
        "join_timeout_s": join_timeout,
    }
    if result:
        details.update(result)
    if rc in TIMEOUT_RCS:
        return sl.verdict(
            "L5",
            "distributed",
            sl.FAIL,
            f"torchrun did not finish within {timeout}s and was killed: not all {nnodes} hosts "
            f"joined the rendezvous at {master}:{port}, or a host stopped mid-run",
            details,
            "check that every host of the group is up and that port "
            f"{port} (and the gloo/nccl ports) are open between them",
            started,
        )
    if rc != 0 or not result:
        why = next((msg for rx, msg in _PATTERNS if rx.search(output)), "torchrun failed")
        details["output_tail"] = output[-3000:]
        return sl.verdict(
            "L5",
            "distributed",
            sl.FAIL,
            f"{why} (exit {rc} after {elapsed:.0f}s; {nnodes} hosts expected at "
            f"{master}:{port}, join timeout {join_timeout}s): {root_cause(output)}",
            details,
            "check that every host of the group is up and reachable from the others",
            started,
        )
    bad = [name for name, r in result["backends"].items() if "skipped" not in r and not r["sum_ok"]]
    if bad:
        return sl.verdict(
            "L5",
            "distributed",
            sl.FAIL,
            f"all_reduce sums wrong on {', '.join(bad)}",
            details,
            None,
            started,
        )
    ran = {n: r for n, r in result["backends"].items() if "skipped" not in r}
    figures = ", ".join(
        f"{n} {r['size_mib']} MiB "
        + (
            f"busbw {r['busbw_gbs']} GB/s"
            if r.get("busbw_gbs") is not None
            else f"algbw {r['algbw_gbs']} GB/s (one host)"
        )
        for n, r in ran.items()
    )
    return sl.verdict(
        "L5",
        "distributed",
        sl.PASS,
        f"all_reduce across {result['world_size']} hosts ok: {figures}",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L5 distributed")
    parser.add_argument("--worker", action="store_true", help=argparse_hidden())
    parser.add_argument("--result", default="")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--master", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--run-id", default="gpuprov-smoke")
    parser.add_argument("--is-host", action="store_true", help="this host is the master")
    parser.add_argument("--join-timeout", type=int, default=60)
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--pg-timeout", type=int, default=60)
    parser.add_argument("--size-mib", type=int, default=16)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    sl.add_install_wait(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.result, args.size_mib, args.iters, args.pg_timeout)
    started = time.monotonic()
    if args.wait_lock:
        _, held = sl.install_wait(args.wait_lock, args.wait_timeout)
        if held:
            v = sl.verdict(
                "L5", "distributed", sl.FAIL, held, hint=sl.INSTALL_HINT, started=started
            )
            sl.emit(v, args.out)
            return sl.exit_code(v)
    result_path = Path(args.result or f"/tmp/gpuprov-l5-{os.getpid()}.json")  # noqa: S108
    cmd = torchrun_command(
        args.python,
        str(Path(__file__).resolve()),
        args.nnodes,
        args.master,
        args.port,
        args.run_id,
        args.join_timeout,
        args.is_host,
        str(result_path),
        args.size_mib,
        args.iters,
        args.pg_timeout,
        args.timeout,
    )
    rc, output, result = sl.run_for_result(cmd, result_path, args.timeout + 30)
    v = judge(
        rc,
        output,
        result,
        args.nnodes,
        args.master,
        args.port,
        args.timeout,
        args.join_timeout,
        time.monotonic() - started,
        started,
    )
    v["details"]["command"] = " ".join(cmd)
    sl.emit(v, args.out)
    return sl.exit_code(v)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
