"""The ``gpu-compat`` command line.

Exit codes: 0 yes/ok/found, 1 no/not found/not recognised, 2 usage or data error.
"""

from __future__ import annotations

import sys

import compat
from compat import CompatError
from compat.cliargs import HOST_OPTIONS, JSON_OPTION, resolve_args

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any, NoReturn

OK, NO, USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    import argparse  # not on the hot path: a plain `resolve` line skips it (compat.cliargs)

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    p = _Parser(
        prog="gpu-compat",
        description="Which driver, CUDA and PyTorch build run on these GPUs, and why.",
        epilog="Exit codes: 0 yes/ok, 1 no/not found, 2 usage or data error.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.add_argument("--json", **JSON_OPTION)
        return sp

    lk = add("lookup", "find GPUs by name, PCI ID (10de:1023) or capability (sm_35, 3.5)")
    lk.add_argument("query")

    def host_args(sp: argparse.ArgumentParser) -> None:
        for flag, options in HOST_OPTIONS.items():
            sp.add_argument(flag, **options, required=flag == "--gpu")

    ck = add("check", "will this torch build run on these GPUs?")
    host_args(ck)
    ck.add_argument(
        "--torch", metavar="VERSION[+VARIANT]", help="torch release, e.g. 2.5.1 or 1.7.1+cu101"
    )
    ck.add_argument(
        "--installed",
        metavar="PATH",
        help="measure the arch list of an installed torch, wheel or .so instead",
    )

    rs = add("resolve", "the newest stack that runs on every GPU of a host")
    host_args(rs)

    ex = add("explain", "cause and fix of an error message")
    ex.add_argument("text", nargs="*", help="the error message (quote it)")
    ex.add_argument("--list", action="store_true", help="list the error messages it knows")
    ex.add_argument("--gpu", action="append", default=[], metavar="G")
    ex.add_argument("--driver", metavar="VERSION")

    mx = add("matrix", "the support table")
    mx.add_argument("--gpu", metavar="G", help="every release that runs on this GPU")
    mx.add_argument("--markdown", action="store_true", help="Markdown table (for the README)")
    mx.add_argument("--channel", choices=("pip", "conda"), default="pip")

    sh = add("show", "list the rows of one table of the matrix")
    sh.add_argument("topic", choices=compat.SHOW_TOPICS)

    ins = add(
        "inspect",
        "measure the CUDA arch lists of torch and its CUDA libraries (cuDNN, cuBLAS, NCCL, ...) "
        "in a wheel, a directory of wheels, an install (venv, site-packages) or a .so",
    )
    ins.add_argument("path")
    ins.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="G",
        help="judge torch and every CUDA library for this GPU (repeat for each GPU)",
    )

    sv = add("serving", "serving stack: ONNX opsets and Triton images")
    sv.add_argument("what", choices=("onnx", "triton"), help="the question to answer")
    sv.add_argument("--torch", metavar="VERSION", help="onnx: torch that exports, e.g. 2.13.0+cpu")
    sv.add_argument("--onnxruntime", metavar="VERSION", help="onnx: the runtime, e.g. 1.16.3")
    sv.add_argument("--opset", type=int, help="onnx: the opset (default: the exporter's default)")
    sv.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript")
    sv.add_argument(
        "--driver", metavar="BRANCH|VERSION", help="triton: the host's driver (535 or 535.183.01)"
    )
    sv.add_argument(
        "--gpu", action="append", default=[], metavar="G", help="triton: a GPU of the host (repeat)"
    )
    sv.add_argument("--tag", help="triton: judge this tag only (e.g. 24.04)")
    sv.add_argument(
        "--forward-compat",
        action="store_true",
        help="triton: accept the data-center branches of CUDA forward compatibility",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        fast = resolve_args(argv)  # a plain `resolve` line needs no argparse (the hot path)
        if fast is not None:
            return _cmd_resolve(fast)
        args = _parser().parse_args(argv)
        return _COMMANDS[args.command](args)
    except CompatError as exc:
        print(f"gpu-compat: error: {exc}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:  # pragma: no cover - e.g. `gpu-compat matrix | head`
        return OK


def _json(data: Any) -> str:
    import json  # only machine output needs it

    return json.dumps(data, indent=2)


def _emit(args: argparse.Namespace, data: Any, human: list[str]) -> None:
    if args.json:
        print(_json(data))
    else:
        print("\n".join(human))


# --------------------------------------------------------------------------- commands


def _cmd_lookup(args: argparse.Namespace) -> int:
    rows = compat.lookup(args.query)
    if not rows:
        hint = compat.suggestions(args.query)
        msg = f"no GPU matches {args.query!r}"
        if hint:
            msg += f"; did you mean {', '.join(repr(h) for h in hint)}?"
        if args.json:
            print(_json({"query": args.query, "gpus": [], "suggestions": hint}))
        else:
            print(msg)
        return NO
    table = _table(
        ["GPU", "CC", "Architecture", "PCI IDs", "Driver branches", "Memory"],
        [
            [
                r["name"],
                r["compute_capability"],
                compat.load().architectures[r["architecture"]].display,
                ", ".join(r["pci_ids"]),
                f"{r['min_driver_branch']}-{r['last_driver_branch']}"
                if r["last_driver_branch"]
                else f"{r['min_driver_branch']}+",
                f"{r['memory_gib']:g} GiB" if r["memory_gib"] else "",
            ]
            for r in rows
        ],
    )
    _emit(args, {"query": args.query, "gpus": rows}, table)
    return OK


def _cmd_check(args: argparse.Namespace) -> int:
    if args.installed:
        from compat.inspect_torch import InspectError, inspect_path

        try:
            measured = inspect_path(args.installed)
        except InspectError as exc:  # a missing path or no torch in it: exit 2, no traceback
            raise CompatError(str(exc)) from exc
        verdict = compat.check_measured(
            args.gpu, measured.to_dict(), driver=args.driver, python=args.python
        )
    elif args.torch:
        verdict = compat.check(
            args.gpu, args.torch, driver=args.driver, python=args.python, channel=args.channel
        )
    else:
        raise CompatError("check needs --torch VERSION[+VARIANT] or --installed PATH")
    torch = str(verdict["torch"])
    # A measured build's version already carries its local part (2.13.0+cpu).
    local = f"+{verdict['variant']}" if verdict["variant"] and "+" not in torch else ""
    name = f"torch {torch}{local}"
    head = "YES" if verdict["compatible"] else "NO"
    human = [
        f"{head}: {name} {'runs' if verdict['compatible'] else 'does not run'} on "
        + ", ".join(g["name"] for g in verdict["gpus"])
    ]
    human += [f"  - {r}" for r in verdict["reasons"]]
    _emit(args, verdict, human)
    return OK if verdict["compatible"] else NO


def _cmd_resolve(args: argparse.Namespace | dict[str, Any]) -> int:
    a = args if isinstance(args, dict) else vars(args)  # a dict: from cliargs.resolve_args
    plan = compat.resolve(a["gpu"], driver=a["driver"], python=a["python"], channel=a["channel"])
    if plan["ok"]:
        plan["notes"] = [*plan.get("notes", []), compat.horovod_note(plan["torch"])]
    print(_json(plan) if a["json"] else "\n".join(format_plan(plan)))
    return OK if plan["ok"] else NO


def format_plan(plan: dict[str, Any]) -> list[str]:
    gpus = ", ".join(
        f"{g['name']} ({compat.ComputeCapability.parse(g['compute_capability']).sm})"
        for g in plan["gpus"]
    )
    out = [f"GPUs:       {gpus or 'none (CPU host)'}"]
    if not plan["ok"]:
        out.append("Plan:       no official build runs on this host")
    else:
        drv = plan["driver"]
        out += [
            f"PyTorch:    torch {plan['torch']}+{plan['variant']}"
            + (f" (CUDA {plan['cuda']})" if plan["cuda"] else " (CPU)")
            + f", torchvision {plan['torchvision'] or '-'}, torchaudio {plan['torchaudio'] or '-'}",
            f"Python:     {', '.join(plan['python'])}",
        ]
        if plan["cuda"]:
            branch = drv["branch"]
            line = f"Driver:     >= {drv['min_version']}"
            if drv["compatibility"] == "minor-version-compatibility":  # its floor applies
                line = (
                    f"Driver:     >= {drv['minor_compat_min_version']} through minor-version "
                    f"compatibility (CUDA {plan['cuda']} itself needs {drv['min_version']})"
                )
            if drv["given"]:
                line += f" (given {drv['given']}: {drv['compatibility']})"
            elif branch:
                line += f"; branch {branch} (newest that drives every GPU and runs this CUDA)"
            out.append(line)
        commands = plan["install"]["commands"]
        out.append(f"Install:    {commands['pip']}")
        if commands["conda"]:
            out.append(f"Conda:      {commands['conda']}")
        if plan.get("container"):
            out.append(
                f"Container:  {plan['container']['image']} (torch {plan['container']['torch']})"
            )
    out.append("Why:")
    out += [f"  - {r}" for r in plan["reasons"]]
    if plan.get("notes"):
        out.append("Notes:")
        out += [f"  - {n}" for n in plan["notes"]]
    return out


def _cmd_explain(args: argparse.Namespace) -> int:
    known = compat.known_errors()
    listing = [f"  {e['id']}: {e['title']}" for e in known]
    if args.list:
        _emit(args, known, ["Known error messages (gpu-compat explain TEXT):", *listing])
        return OK
    if not args.text:
        raise CompatError("explain needs the error message TEXT, or --list")
    text = " ".join(args.text)
    ans = compat.explain(text, args.gpu, driver=args.driver)
    if not ans["recognised"]:
        ans = compat.horovod_explain(text) or ans
    if not ans["recognised"]:
        human = ["Not a known error message. Known (gpu-compat explain --list):", *listing]
    else:
        human = [f"{ans['title']} [{ans['id']}]", f"Cause: {ans['cause']}"]
        if ans["matrix"]:
            human.append("From the matrix:")
            human += [f"  - {x}" for x in ans["matrix"]]
        if ans["checks"]:
            human.append("Check:")
            human += [f"  - {x}" for x in ans["checks"]]
        if ans["fixes"]:
            human.append("Fix:")
            human += [f"  - {x}" for x in ans["fixes"]]
    _emit(args, ans, human)
    return OK if ans["recognised"] else NO


def _support_tail(d: dict[str, Any]) -> list[str]:
    return [d["driver_branches"], d["newest_cuda"] or "-", d["pip"], d["conda"]]


def _cmd_matrix(args: argparse.Namespace) -> int:
    if args.gpu:
        data: Any = compat.releases_for_gpu(args.gpu, args.channel)
        header = ["torch", "variants", "Python"]
        rows = [
            [d["torch"], " ".join(d["variants"]), " ".join(d["python"])]
            for d in reversed(data["releases"])
        ]
    else:
        data = compat.support_rows()
        header = [
            "CC",
            "Architecture",
            "GPUs (examples)",
            "Driver branches",
            "Newest CUDA",
            "Newest torch (pip)",
            "Newest torch (conda)",
        ]
        rows = [
            [d["compute_capability"], d["architecture"], ", ".join(d["gpus"]), *_support_tail(d)]
            for d in data
        ]
    if args.json:
        print(_json(data))
    elif args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(str(c) for c in r) + " |")
    elif rows:
        print("\n".join(_table(header, rows)))
    else:  # a capability no GPU of the data has, or a GPU no official build runs on
        print(f"no official {args.channel} build runs on {args.gpu}")
    return OK if rows else NO


def _cmd_inspect(args: argparse.Namespace) -> int:
    data = compat.inspect(args.path, args.gpu)
    d = data["torch"]
    human = []
    if d is not None:
        human.append(f"torch {d.get('torch_version') or '?'} ({d.get('cuda') or 'no CUDA'})")
        if d["cpu_only"]:
            human.append("CPU-only build: no CUDA kernels")
        else:
            human.append("SASS: " + " ".join(d["sass"]))
            human.append("PTX:  " + (" ".join(d["ptx"]) or "-"))
            for arch, where in sorted(d.get("extras", {}).items()):
                human.append(f"extra {arch}: {', '.join(where)} (vendor code, not coverage)")
    for lib in data["libraries"]:
        version = f" {lib['version']}" if lib["version"] else ""
        kernels = f"SASS {' '.join(lib['sass']) or '-'}; PTX {' '.join(lib['ptx']) or '-'}"
        human.append(f"{lib['display']} ({lib['package']}{version}): {kernels}")
    for g in data["gpus"]:
        label = f"{g['name']} ({g['compute_capability']})"
        if "torch" in g:
            t = g["torch"]
            human.append(f"{label}: torch: " + _how(t["result"], t["covered_by"]))
        for c in g["libraries"]:
            human.append(
                f"{label}: {c['display']} {c['version'] or ''}: "
                + _how(c["result"], c["covered_by"])
            )
        weak = g["weakest_link"]
        if weak is not None:
            human.append(
                f"{label}: weakest link: {weak['display']} "
                f"({_how(weak['result'], weak['covered_by'])})"
            )
    _emit(args, data, human)
    return OK if data["ok"] else NO


def _how(result: str, entry: str | None) -> str:
    return f"{result} {entry}" if entry else "NO kernel image: its operations fail here"


def _cmd_show(args: argparse.Namespace) -> int:
    rows = compat.show(args.topic)
    human = [
        " ".join(f"{v if not isinstance(v, list) else ' '.join(v)}" for v in r.values())
        for r in rows
    ]
    _emit(args, rows, human)
    return OK


def _cmd_serving(args: argparse.Namespace) -> int:
    if args.what == "onnx":
        if not (args.torch and args.onnxruntime):
            raise CompatError("serving onnx needs --torch VERSION and --onnxruntime VERSION")
        v = compat.serving_onnx(args.torch, args.onnxruntime, args.opset, args.exporter)
        head = {True: "YES", False: "NO", None: "UNKNOWN"}[v["ok"]]
        human = [f"{head}: torch {args.torch} opset {v['opset']} on onnxruntime {args.onnxruntime}"]
        _emit(args, v, [*human, *(f"  - {r}" for r in v["reasons"])])
        return OK if v["ok"] else NO
    data = compat.serving_triton(args.driver, args.gpu, args.forward_compat, args.tag)
    pick = data["pick"]
    human = [
        f"Pick: {pick['image']}" if pick else "Pick: none of the known tritonserver tags runs here"
    ]
    for v in data["images"]:
        human.append(f"  {'ok ' if v['ok'] else 'no '} {v['image']}: {'; '.join(v['reasons'])}")
    _emit(args, data, human)
    return OK if pick else NO


_COMMANDS = {
    "lookup": _cmd_lookup,
    "check": _cmd_check,
    "resolve": _cmd_resolve,
    "explain": _cmd_explain,
    "matrix": _cmd_matrix,
    "inspect": _cmd_inspect,
    "show": _cmd_show,
    "serving": _cmd_serving,
}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(c) for c in r)).rstrip() for r in rows]
    return lines
