# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Count, per host, the module runs that went to the host (issue 19: a no-op run's cost is
Ansible's per-task floor on the host, so the count is what the fast path must bring down)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: gpuprov_remote
type: aggregate
short_description: Print per host how many module runs went to the host
description:
  - At the end of the run, one line per host with the number of module runs that were sent
    to it (each loop item counts once), the number of tasks that ran only on the controller
    (assert, set_fact, debug, include_vars, ...) and the number skipped.
  - A task counts as remote unless its action runs on the controller only, it is delegated
    to localhost, its action plugin answered without the host (C(reused), gpu_info's
    C(reuse=run)), or it was skipped.
  - With O(recap_file) set, it also writes Ansible's recap and these counts, per host, as
    JSON to that file (the pull wrapper of roles/gpuprov_pull reports a run from it).
requirements:
  - enable in ansible.cfg (callbacks_enabled)
options:
  recap_file:
    description: Where to write the per-host recap as JSON; unset, nothing is written.
    type: path
    env:
      - name: GPUPROV_RECAP_FILE
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase

# Actions whose plugin never sends a module to the host.
LOCAL_ACTIONS = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in (
        "add_host",
        "assert",
        "debug",
        "fail",
        "group_by",
        "include_role",
        "include_tasks",
        "include_vars",
        "import_role",
        "import_tasks",
        "meta",
        "set_fact",
        "set_stats",
        "validate_argument_spec",
    )
) | {"gpuprov_report_write"}  # plugins/action/gpuprov_report_write.py: no module


def is_remote(action: str, delegate_to: str | None) -> bool:
    """Whether a task with ``action`` (delegated to ``delegate_to``) runs a module on a host."""
    if action in LOCAL_ACTIONS:
        return False
    return delegate_to not in ("localhost", "127.0.0.1")


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuprov_remote"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.remote: Counter[str] = Counter()
        self.local: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()

    def _count(self, result: Any, skipped: bool = False) -> None:
        host = result._host.get_name()
        task = result._task
        if skipped:
            self.skipped[host] += 1
        elif is_remote(task.action, task.delegate_to) and result._result.get("reused") is not True:
            # A looped task reports each item and then the whole; count the items that ran.
            items = result._result.get("results")
            if isinstance(items, list) and task.loop:
                self.remote[host] += sum(1 for i in items if not i.get("skipped"))
            else:
                self.remote[host] += 1
        else:
            self.local[host] += 1

    def v2_runner_on_ok(self, result: Any) -> None:
        self._count(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._count(result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._count(result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._count(result, skipped=True)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        recap_file = self.get_option("recap_file")
        if recap_file:
            self._write_recap(Path(recap_file), stats)
        hosts = sorted(set(self.remote) | set(self.local) | set(self.skipped))
        if not hosts:
            return
        self._display.banner("MODULE RUNS ON HOSTS (gpuprov_remote)")
        for host in hosts:
            self._display.display(
                f"{host}: remote={self.remote[host]} controller-only={self.local[host]}"
                f" skipped={self.skipped[host]}"
            )

    def _write_recap(self, path: Path, stats: Any) -> None:
        """Ansible's recap (ok, changed, failures, ...) and the module runs, per host."""
        recap = {
            host: {
                **stats.summarize(host),
                "remote": self.remote[host],
                "controller_only": self.local[host],
            }
            for host in sorted(stats.processed)
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recap, indent=1, sort_keys=True) + "\n", encoding="utf-8")
