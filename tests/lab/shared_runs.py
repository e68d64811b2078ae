"""Runs of site.yml that several lab modules judge: converges are shared (issue 19).

test_site.py's no-op re-run runs every play of site.yml a second time on the converged lab,
and its `--check --diff` of the converged lab runs every play under check mode. The modules
that judge a second run of their own plays (jupyterlab.yml and storage.yml; launch.yml and
monitoring.yml) and check mode of them judge those runs when the session has them (the
`site_runs` session fixture, conftest.py): a second run of the same playbooks against the
same lab proves nothing more and cost about three and a half minutes of CI. In that mode a
module's zero-change verdict is test_site.py's (a run is kept only when its test passed);
the module asserts that the run did its plays' work on its hosts (`Run.ran`) and judges what
only it looks at (verification messages, reports, secrets in the output). A module run alone,
after a test_site.py run that failed, or after it converged the lab again itself (its fixture
then forgets the kept runs: they no longer describe the lab), runs its plays itself.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import yaml
from playbook_output import OUTCOME

NOOP = "noop"  # site.yml on the converged lab, after the drift repair: must change nothing
CHECK = "check"  # site.yml --check --diff on the converged lab: must predict no change


@dataclasses.dataclass(frozen=True)
class Run:
    """One ansible-playbook run as the modules judge it."""

    returncode: int
    stdout: str
    recap: dict[str, dict[str, int]]  # host -> {"changed", "unreachable", "failed"}
    reports: Path | None  # the reports as the run left them (a copy), when kept
    plays: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)

    def ran(self, playbook: Path) -> set[str]:
        """The hosts every play of `playbook` did work on in this run (a task not skipped):
        a module judging a shared run first asserts that its plays were in it."""
        names = play_names(playbook)
        missing = [n for n in names if n not in self.plays]
        assert not missing, f"{playbook.name}: plays {missing} not in the run"
        return set.intersection(*(set(self.plays[n]) for n in names))


def play_names(playbook: Path) -> list[str]:
    """The names of a playbook file's own plays (what the json callback calls them)."""
    return [str(p["name"]) for p in yaml.safe_load(playbook.read_text()) if "hosts" in p]


GATHERING_FACTS = "Gathering Facts"  # a play's implicit fact gathering: not the play's work


def json_plays(doc: dict[str, Any]) -> dict[str, frozenset[str]]:
    """play name -> the hosts it did work on (a task of its own, not skipped)."""
    found: dict[str, set[str]] = {}
    for play in doc["plays"]:
        hosts = found.setdefault(play["play"]["name"], set())
        for task in play["tasks"]:
            if task["task"]["name"] == GATHERING_FACTS:
                continue
            hosts.update(h for h, r in task["hosts"].items() if not r.get("skipped"))
    return {name: frozenset(hosts) for name, hosts in found.items()}


def json_recap(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The json callback's stats as the play recap's OUTCOME counters."""
    names = {"failed": "failures"}  # the json callback's name for the recap's failed=
    return {host: {k: int(s[names.get(k, k)]) for k in OUTCOME} for host, s in doc["stats"].items()}


def keep(
    runs: dict[str, Run],
    key: str,
    stdout: str,
    doc: dict[str, Any],
    reports: tuple[Path, Path] | None = None,
) -> None:
    """Keep a run that passed its own test. `reports` (the report directory the run wrote,
    where to keep it) is copied at once: later runs (a check run, a plan with a host stopped)
    rewrite the lab's report directory."""
    kept = None
    if reports is not None:
        written, kept = reports
        shutil.copytree(written, kept, dirs_exist_ok=True)
    runs[key] = Run(0, stdout, json_recap(doc), kept, json_plays(doc))
