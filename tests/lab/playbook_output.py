"""The PLAY RECAP of an ansible-playbook run's output, read one way for every lab module.

The default callback ends a run with one line per host:
`lab-k40m : ok=12 changed=0 unreachable=0 failed=0 skipped=3 rescued=0 ignored=0`.
A test's output may hold several runs (one PLAY RECAP each, in order).
"""

from __future__ import annotations

import re

MARK = "PLAY RECAP"
LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counters>ok=\d+\b.*)$", re.MULTILINE)
COUNTER = re.compile(r"(\w+)=(\d+)")

Recap = dict[str, dict[str, int]]  # host -> counter (ok, changed, unreachable, failed, ...) -> n
OUTCOME = ("changed", "unreachable", "failed")  # what a zero-change verdict compares
CONVERGED = dict.fromkeys(OUTCOME, 0)  # a host's outcomes when the run changed nothing there


def recaps(output: str) -> list[Recap]:
    """Every PLAY RECAP in the output, in order."""
    return [
        {
            m["host"]: {k: int(v) for k, v in COUNTER.findall(m["counters"])}
            for m in LINE.finditer(section)
        }
        for section in output.split(MARK)[1:]
    ]


def recap(output: str) -> Recap:
    """The last PLAY RECAP of the output (the run's own, when it holds one run)."""
    found = recaps(output)
    assert found, f"no {MARK} in:\n{output[-3000:]}"
    assert found[-1], f"no host in the last {MARK} of:\n{output[-3000:]}"
    return found[-1]


def recap_total(output: str) -> Recap:
    """Each host's counters summed over every PLAY RECAP of the output."""
    found = recaps(output)
    assert found, f"no {MARK} in:\n{output[-3000:]}"
    total: Recap = {}
    for one in found:
        for host, counters in one.items():
            mine = total.setdefault(host, {})
            for key, n in counters.items():
                mine[key] = mine.get(key, 0) + n
    return total


def outcomes(counters: Recap) -> Recap:
    """Each host's OUTCOME counters only (the form shared_runs.Run keeps)."""
    return {host: {k: c[k] for k in OUTCOME} for host, c in counters.items()}
