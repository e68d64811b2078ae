"""The CLI's hot path: the command line of ``gpu-compat resolve`` read without argparse.

Importing argparse and building the parser of every subcommand costs more than the answer
itself (``scripts/bench_cli.py``). :func:`resolve_args` reads the plain shape of a resolve
command line, ``resolve --gpu G [--gpu G ...] [--driver V] [--python X.Y] [--channel C]
[--json]`` with each option as ``--opt VALUE`` or ``--opt=VALUE``, into what argparse would
return. Anything else (help, abbreviations, ``--``, a value that starts with a dash, errors,
other subcommands) gets None, and argparse reads and reports it as before. The host options
are declared once, here, for both readers: ``compat.cli`` adds them to its argparse parser.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# The host options of `check` and `resolve`: flag -> keyword arguments of add_argument (cli
# adds required=True to --gpu). resolve_args reads "action", "choices" and "default".
HOST_OPTIONS: dict[str, dict[str, Any]] = {
    "--gpu": {
        "action": "append",
        "default": [],
        "metavar": "G",
        "help": "a GPU of the host (repeat for each GPU)",
    },
    "--driver": {"metavar": "VERSION", "help": "installed driver, e.g. 535.183.01"},
    "--python": {"metavar": "X.Y", "help": "Python version of the environment"},
    "--channel": {"choices": ("pip", "conda"), "default": "pip"},
}
# Every subcommand's --json flag.
JSON_OPTION: dict[str, Any] = {"action": "store_true", "help": "machine-readable output"}


def resolve_args(argv: Sequence[str]) -> dict[str, Any] | None:
    """``vars()`` of argparse's namespace for a plain ``resolve`` command line, else None."""
    if not argv or argv[0] != "resolve":
        return None
    args: dict[str, Any] = {"command": "resolve", "json": False}
    for flag, spec in HOST_OPTIONS.items():
        default = spec.get("default")
        args[flag[2:]] = list(default) if isinstance(default, list) else default
    rest = iter(argv[1:])
    for arg in rest:
        if arg == "--json":
            args["json"] = True
            continue
        flag, eq, value = arg.partition("=")
        option = HOST_OPTIONS.get(flag)
        if option is None:
            return None
        if not eq:
            value = next(rest, "")
        if not value or value.startswith("-") or value not in option.get("choices", (value,)):
            return None
        if option.get("action") == "append":
            args[flag[2:]].append(value)
        else:
            args[flag[2:]] = value
    return args if args["gpu"] else None
