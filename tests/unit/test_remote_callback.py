"""plugins/callback/gpuprov_remote.py: the per-host count of module runs (issue 19, goal 2),
checked on a real ansible-playbook run over the local connection (two inventory names, one
machine): what each task is and how many items it ran are known from the playbook below."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from local_play import run_local_play

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")


PLAYBOOK = """
- name: Count
  hosts: all
  gather_facts: false
  tasks:
    - name: Controller only
      ansible.builtin.set_fact:
        x: 1
    - name: Controller only too
      ansible.builtin.assert:
        that: [x == 1]
        quiet: true
    - name: One module run
      ansible.builtin.command: "true"
      changed_when: false
    - name: Two of three items run (on h1 only)
      ansible.builtin.command: "true"
      changed_when: false
      loop: [1, 2, 3]
      when: inventory_hostname == 'h1' and item != 2
    - name: Skipped
      ansible.builtin.command: "true"
      when: false
    - name: Delegated to the controller
      ansible.builtin.command: "true"
      changed_when: false
      delegate_to: localhost
    - name: A scan (one module run)
      gpu_info:
        sysfs_root: /nonexistent
    - name: This run's scan again (the action plugin answers, no module run)
      gpu_info:
        sysfs_root: /nonexistent
        reuse: run
"""


def test_counts_per_host(tmp_path: Path) -> None:
    book = tmp_path / "count.yml"
    book.write_text(PLAYBOOK)
    proc = run_local_play(book, tmp_path)
    assert not (tmp_path / "recap.json").exists()
    lines = dict(re.findall(r"^(h[12]): (remote=.*)$", proc.stdout, re.M))
    # h1: command, two loop items, a scan; h2: command, a scan, the loop skipped whole.
    # Delegated and reused: controller.
    assert lines == {
        "h1": "remote=4 controller-only=4 skipped=1",
        "h2": "remote=2 controller-only=4 skipped=2",
    }, proc.stdout


def test_recap_file_holds_the_recap_and_the_counts(tmp_path: Path) -> None:
    """GPUPROV_RECAP_FILE: the recap as JSON (roles/gpuprov_pull's wrapper reads it), a failed
    host's failures counted."""
    book = tmp_path / "count.yml"
    book.write_text(
        PLAYBOOK
        + """    - name: Fails on h2
      ansible.builtin.command: "false"
      when: inventory_hostname == 'h2'
"""
    )
    recap = tmp_path / "out" / "recap.json"
    run_local_play(book, tmp_path, {"GPUPROV_RECAP_FILE": str(recap)}, rc=2)
    got = json.loads(recap.read_text())
    assert sorted(got) == ["h1", "h2"]
    assert (got["h1"]["failures"], got["h2"]["failures"]) == (0, 1)
    assert (got["h1"]["remote"], got["h2"]["remote"]) == (4, 3)
    assert (got["h1"]["skipped"], got["h2"]["skipped"]) == (2, 2)
    assert got["h2"]["changed"] == 0
