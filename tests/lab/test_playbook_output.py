"""playbook_output.py reads the PLAY RECAP of the default callback (runs without a lab)."""

from __future__ import annotations

import pytest
from playbook_output import recap, recap_total, recaps

# Two runs in one output, as ansible-core 2.19's default callback and profile_tasks print
# them (a task line that mentions ok= is not a recap line).
TWO_RUNS = """\
TASK [docker : service | Start and enable docker] ******************************
ok: [lab-k40m] => {"msg": "ok=3 is not a recap"}

PLAY RECAP *********************************************************************
lab-k40m                   : ok=12   changed=2    unreachable=0    failed=0    skipped=3    rescued=0    ignored=0
lab-m40                    : ok=10   changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0

Saturday 05 December 2026  04:47:49 +0000 (0:00:01.204)       0:09:02.110 *****
===============================================================================
pytorch : install-pip | Install torch into the virtual environment ----- 58.20s

PLAY RECAP *********************************************************************
lab-k40m                   : ok=9    changed=0    unreachable=0    failed=1    skipped=4    rescued=1    ignored=0
"""  # noqa: E501


def test_every_recap_in_order_with_all_its_counters() -> None:
    first, second = recaps(TWO_RUNS)
    assert first == {
        "lab-k40m": {
            "ok": 12,
            "changed": 2,
            "unreachable": 0,
            "failed": 0,
            "skipped": 3,
            "rescued": 0,
            "ignored": 0,
        },
        "lab-m40": {
            "ok": 10,
            "changed": 0,
            "unreachable": 1,
            "failed": 0,
            "skipped": 0,
            "rescued": 0,
            "ignored": 0,
        },
    }
    assert second["lab-k40m"]["failed"] == 1
    assert set(second) == {"lab-k40m"}


def test_recap_is_the_last_run_and_total_sums_them() -> None:
    assert recap(TWO_RUNS)["lab-k40m"]["ok"] == 9
    assert "lab-m40" not in recap(TWO_RUNS)
    total = recap_total(TWO_RUNS)
    assert total["lab-k40m"]["ok"] == 21
    assert total["lab-k40m"]["changed"] == 2
    assert total["lab-k40m"]["rescued"] == 1
    assert total["lab-m40"]["unreachable"] == 1


def test_an_output_without_a_recap_is_named() -> None:
    with pytest.raises(AssertionError, match="no PLAY RECAP in:\nfatal: no hosts"):
        recap("fatal: no hosts")
    with pytest.raises(AssertionError, match="no PLAY RECAP"):
        recap_total("")
