# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Load the Jinja filter and test plugins once, in ansible-playbook's own process, before the
first task (issue 19: the controller's cost per task and host)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: gpuprov_preload
type: aggregate
short_description: Load the Jinja filters and tests once, before the first task
description:
  - ansible-playbook forks a worker process for every task and host. A worker that templates
    anything with a filter or a test first loads every filter and test plugin file of the
    configured paths (Ansible's own and C(filter_plugins)) and this collection's filter files,
    and the worker ends with the task.
    On a 1-host no-op of gpuprov's stack plays that was 448 module loads in 51 workers, about
    a seventh of their CPU (profiled, 2026-12-05).
  - At the start of the playbook this callback loads them in ansible-playbook's own process,
    so that every worker forked after it has them already. It prints nothing and changes
    nothing else; without it the workers load them themselves, as before.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""

import contextlib
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

# One plugin of each loader: the first lookup loads all plugin files of the configured paths;
# the lookup of one of this collection's filters by its full name loads its filter files (the
# roles name them so; installed as a collection, filter_plugins is not set).
FIRST_LOOKUPS = (
    (filter_loader, "ansible.builtin.to_json"),
    (test_loader, "ansible.builtin.match"),
    (filter_loader, "gpuprov.fleet.gpu_compat_resolve"),
)


class CallbackModule(CallbackBase):  # type: ignore[misc]  # ansible-core ships no type hints
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuprov_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        # A plugin that cannot load here fails in the worker that uses it, as without this.
        with contextlib.suppress(Exception):
            for loader, name in FIRST_LOOKUPS:
                loader.get(name)
