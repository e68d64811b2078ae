# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Action plugin gpuprov_report_write: write one report file on the controller, in the worker
that runs the task, with no module sent anywhere (issue 19: a delegated ``file`` plus
``copy`` cost two module runs, about a second each, for every host and report kind).

Arguments: ``path`` (the report file on the controller) and ``content`` (its text). The
directory is created (0755) when missing; the file is replaced atomically (0644). A report
is not a change to the host: the result is never ``changed``. Check mode is the caller's
decision (roles/gpuprov_report skips the task under --check unless asked).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


def write_report(path: Path, content: str) -> None:
    """Write ``content`` to ``path`` atomically (0644), creating its directory (0755)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no type hints
    """Controller-only: no connection to the host is used."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"path", "content"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        path, content = self._task.args.get("path"), self._task.args.get("content")
        if not path or content is None:
            raise AnsibleActionFail("gpuprov_report_write: path and content are required")
        target = Path(str(path))
        try:
            write_report(target, str(content))
        except OSError as exc:
            raise AnsibleActionFail(
                f"gpuprov_report_write: cannot write {target}: {exc.strerror}; check that "
                "gpuprov_report_dir (or the role's *_report_dir) names a writable directory "
                "on the controller"
            ) from exc
        result.update(changed=False, path=str(target))
        return result
