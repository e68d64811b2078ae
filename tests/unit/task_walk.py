"""Every task of a parsed playbook or task file, for the structural tests over roles/ and
playbooks/: plays' task lists and blocks' rescue/always included, in file order."""

from __future__ import annotations

from typing import Any

NESTED = ("tasks", "pre_tasks", "post_tasks", "block", "rescue", "always")


def all_tasks(doc: Any) -> list[dict[str, Any]]:
    """The mappings of ``doc`` (a YAML list) and, depth first, of their nested task lists."""
    out: list[dict[str, Any]] = []
    for item in doc if isinstance(doc, list) else []:
        if isinstance(item, dict):
            out.append(item)
            for key in NESTED:
                out += all_tasks(item.get(key))
    return out
