"""plugins/callback/gpuprov_preload.py on a real ansible-playbook run (local connection): a
filter plugin file that records the process loading it is loaded once, by ansible-playbook
itself, with the callback; by the forked workers, once per task and host, without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_play import run_local_play

# Their ansible-playbook children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = """
import os
from pathlib import Path

with Path(os.environ["LOADS_FILE"]).open("a") as fh:
    fh.write(f"{os.getpid()}\\n")


class FilterModule:
    def filters(self):
        return {"twice": lambda v: v * 2}
"""

PLAYBOOK = """
- name: Template with a filter in three tasks on two hosts
  hosts: all
  gather_facts: false
  tasks:
    - name: One
      ansible.builtin.debug:
        msg: "{{ 1 | twice }}"
    - name: Two
      ansible.builtin.debug:
        msg: "{{ 2 | twice }}"
    - name: Three
      ansible.builtin.assert:
        that: (3 | twice) == 6
"""


def _loads(tmp_path: Path, callbacks: str) -> list[str]:
    filters = tmp_path / "filters"
    filters.mkdir(exist_ok=True)
    (filters / "count_loads.py").write_text(PLUGIN)
    book = tmp_path / "book.yml"
    book.write_text(PLAYBOOK)
    loads = tmp_path / f"loads-{len(callbacks)}.txt"
    env = {
        "ANSIBLE_FILTER_PLUGINS": f"{filters}:{ROOT / 'plugins' / 'filter'}",
        "ANSIBLE_CALLBACKS_ENABLED": callbacks,
        "LOADS_FILE": str(loads),
    }
    run_local_play(book, tmp_path, env)
    return loads.read_text().split()


def test_the_filters_are_loaded_once_by_ansible_playbook_itself(tmp_path: Path) -> None:
    without = _loads(tmp_path, "gpuprov_remote")
    # 3 tasks x 2 hosts, each in its own worker process
    assert len(without) == 6
    assert len(set(without)) == 6
    with_preload = _loads(tmp_path, "gpuprov_remote, gpuprov_preload")
    assert len(with_preload) == 1


def test_ansible_cfg_enables_it() -> None:
    cfg = (ROOT / "ansible.cfg").read_text()
    enabled = next(line for line in cfg.splitlines() if line.startswith("callbacks_enabled"))
    assert "gpuprov_preload" in enabled
