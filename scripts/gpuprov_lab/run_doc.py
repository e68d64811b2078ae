"""An ansible-playbook run's document from the json callback (``ansible.builtin.json``), read
one way for the lab tests and the benchmarks: the document itself, and where a run's time went.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

# The package managers' actions: what a shell script that installs the same does too.
INSTALL_ACTIONS = frozenset(
    {
        "ansible.builtin.apt",
        "ansible.builtin.dnf",
        "ansible.builtin.package",
        "ansible.builtin.pip",
        "apt_ready",
        "gpuprov.fleet.apt_ready",
        # The wait for a background install's lock (the install runs beside other plays).
        "gpuprov_wait_lock",
        "gpuprov.fleet.gpuprov_wait_lock",
    }
)
# What only checks what the run left: the verify phases (file stem verify*), the smoke test's
# run and report (its install writes files, as the script does), and the waits for a service
# to answer (handlers and tasks). A wait in an install phase waits for an install (model
# serving's background pip job): install time.
VERIFY_STEM = "verify"
VERIFY_PHASES = frozenset({("gpu_smoke", "run"), ("gpu_smoke", "report")})
WAITS = ("Wait for ", "Wait until ")


DOC_START = re.compile(r"^\{", re.MULTILINE)


def json_document(stdout: str, need: Iterable[str] = ("stats", "plays")) -> dict[str, Any] | None:
    """The json callback's document in ``stdout`` (other callbacks' lines, such as
    profile_tasks', may come around it): the last JSON object at the start of a line that
    holds every key of ``need``; None when there is none. The last: a run of several playbook
    files prints a document at the end of each, and each holds every play so far (the
    callback sends its stats per file and never forgets a play), so the last is the whole
    run's."""
    decoder = json.JSONDecoder()
    found = None
    match = DOC_START.search(stdout)
    while match:
        try:
            doc, end = decoder.raw_decode(stdout, match.start())
        except json.JSONDecodeError:
            end = match.end()
        else:
            if isinstance(doc, dict) and all(k in doc for k in need):
                found = doc
        match = DOC_START.search(stdout, end)
    return found


class Share(NamedTuple):
    seconds: float
    tasks: int


def _seconds(task: dict[str, Any]) -> float:
    span = task.get("duration") or {}
    try:
        start = datetime.fromisoformat(str(span["start"]))  # Python 3.11 reads the "Z"
        end = datetime.fromisoformat(str(span["end"]))
    except (KeyError, ValueError):
        return 0.0
    return max((end - start).total_seconds(), 0.0)


def kind_of(name: str, action: str) -> str:
    """install, verify or other, for a task named ``name`` (``role : stem | what``, the role
    and file stem of a role's task) that ran ``action``."""
    role, _, rest = name.rpartition(" : ")  # the house's task names (tests/unit/test_roles.py)
    head, _, what = rest.rpartition(" | ")
    stem = head.split(" | ", 1)[0]
    waits = what.startswith(WAITS)
    # A wait in an install phase, or for an install's lock (gpuprov_wait_lock), is install time.
    if action in INSTALL_ACTIONS or (waits and stem.startswith("install")):
        return "install"
    if stem.startswith(VERIFY_STEM) or (role, stem) in VERIFY_PHASES or waits:
        return "verify"
    return "other"


def time_by_kind(doc: dict[str, Any]) -> dict[str, Share]:
    """The task time of a one-host run by kind (install, verify, other): each task's duration
    as the json callback timed it (start of the task to its last result), skipped tasks
    included (they cost their share of the per-task floor too)."""
    shares = {k: Share(0.0, 0) for k in ("install", "verify", "other")}
    for play in doc.get("plays") or []:
        for task in play.get("tasks") or []:
            meta = task.get("task") or {}
            actions = {str(r.get("action", "")) for r in (task.get("hosts") or {}).values()}
            kind = kind_of(str(meta.get("name", "")), next(iter(sorted(actions)), ""))
            old = shares[kind]
            shares[kind] = Share(old.seconds + _seconds(meta), old.tasks + 1)
    return shares
