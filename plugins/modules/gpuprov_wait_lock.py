#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Wait for a background install's lock to be let go, and name who holds it if it is not."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuprov_wait_lock
short_description: Wait until no process holds a lock file (a gpuprov background install's)
description:
  - gpuprov's background installs (torch, JupyterLab's download, the storage tools, the Triton
    packages) hold a flock(2) lock on a file while they run. A role waits with this module
    before it reads or writes what the job writes.
  - A missing lock file is nothing to wait for (no job since boot). Otherwise the module takes
    a shared lock and lets go of it at once, waiting at most O(timeout) seconds for the holder.
    /proc/locks lists the module as a waiter meanwhile.
  - When the timeout runs out, the task fails and names the lock, O(what), and the process
    that holds it (PID and command line, from /proc/locks).
  - Nothing is changed; the module never reports a change.
version_added: "0.3.0"
author: gpuprov contributors
options:
  path:
    description: The lock file.
    type: path
    required: true
  timeout:
    description: The most seconds to wait (the job's own limit).
    type: int
    required: true
  what:
    description: What holds the lock, for the message of a timeout.
    type: str
    default: a background install
attributes:
  check_mode:
    support: full
    details: Under C(--check) the module does not wait; it says whether the lock is held.
"""

EXAMPLES = r"""
- name: Wait for my background job to finish
  gpuprov_wait_lock:
    path: /run/my-job/job.lock
    timeout: 3600
    what: my background job
"""

RETURN = r"""
exists:
  description: Whether the lock file exists (no file, no wait).
  type: bool
  returned: always
held:
  description: Whether a process held the lock when the module began.
  type: bool
  returned: always
waited:
  description: Seconds waited.
  type: float
  returned: always
holders:
  description: C(PID COMMAND) of each holder when the module began (or at its timeout).
  type: list
  elements: str
  returned: always
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The wait itself, shared with gpuprov_state (plugins/module_utils/lock_wait.py; shipped with
# this module by AnsiballZ, from the collection or ansible.cfg's module_utils).
try:
    from ansible_collections.gpuprov.fleet.plugins.module_utils import lock_wait as _lw
except ImportError:
    from ansible.module_utils import lock_wait as _lw


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    timeout = 0 if module.check_mode else params["timeout"]
    try:
        waited = _lw.wait(params["path"], timeout)
    except OSError as exc:
        module.fail_json(msg=f"gpuprov_wait_lock: cannot open {params['path']}: {exc.strerror}")
    result: dict[str, Any] = {
        "changed": False,
        "exists": waited.exists,
        "held": waited.held,
        "waited": round(waited.seconds, 3),
        "holders": waited.holders,
    }
    if waited.timed_out and not module.check_mode:
        msg = _lw.timed_out_message(params["path"], params["timeout"], params["what"], waited)
        module.fail_json(msg=msg, **result)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "timeout": {"type": "int", "required": True},
            "what": {"type": "str", "default": "a background install"},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
