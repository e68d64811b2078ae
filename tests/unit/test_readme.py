"""The README stays true: its support table is the one the data generates, and the CLI
examples it shows exit as it says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_support_table_is_generated_from_the_data() -> None:
    import readme_table as mod  # scripts/ is on pytest's pythonpath

    text = (ROOT / "README.md").read_text()
    assert mod.render(text) == text, "README table is stale: run `make readme-table`"


def test_readme_names_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert re.search(r"^make lab$", text, re.MULTILINE)
    assert re.search(r"^make test$", text, re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("make test")


def readme_examples() -> list[tuple[list[str], list[str], int | None]]:
    """The README's `$ gpu-compat ...` examples that show output: (argv, the lines shown before
    an `...` line or the end, the exit code shown by `; echo $?`)."""
    import shlex

    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.DOTALL):
        for chunk in re.split(r"^(?=\$ )", block, flags=re.MULTILINE):
            lines = chunk.rstrip("\n").split("\n")
            if not lines[0].startswith("$ gpu-compat ") or len(lines) == 1:
                continue
            command = lines[0][2:].split("  #")[0].strip()
            code = None
            if command.endswith("; echo $?"):
                command, code = command.removesuffix("; echo $?").strip(), int(lines.pop())
            shown = [ln for ln in lines[1:] if ln.strip()]
            if "..." in [ln.strip() for ln in shown]:
                shown = shown[: [ln.strip() for ln in shown].index("...")]
            out.append((shlex.split(command)[1:], shown, code))
    return out


def test_the_cli_examples_print_what_the_readme_shows(capsys) -> None:  # type: ignore[no-untyped-def]
    from compat.cli import main

    examples = readme_examples()
    assert len(examples) >= 4
    for argv, shown, code in examples:
        got = main(argv)
        printed = capsys.readouterr().out.splitlines()
        assert [ln.rstrip() for ln in printed[: len(shown)]] == shown, argv
        if code is not None:
            assert got == code, argv
