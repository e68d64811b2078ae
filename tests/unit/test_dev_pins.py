"""requirements-dev.txt (what gpuprov uses) and constraints-dev.txt (what those pull in) pin
the whole closure of the development and CI environment, once each.

Read from the installed distributions' own metadata (importlib.metadata), so the test fails
when a pinned tool gains a dependency nobody pinned, when a pin differs from what this
environment runs (a stale file), or when a distribution is pinned in both files.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep == "==", f"{path.name}: {line!r} is not name==version"
            assert version, f"{path.name}: {line!r} has no version"
            pins[_name(name)] = version
    return pins


DIRECT = _pins(ROOT / "requirements-dev.txt")
CONSTRAINED = _pins(ROOT / "constraints-dev.txt")


def _closure(roots: list[str]) -> dict[str, set[str]]:
    """name -> who requires it, from each installed distribution's Requires-Dist (markers
    evaluated for this interpreter and the extras asked for)."""
    seen: dict[str, set[str]] = {r: {"requirements-dev.txt"} for r in roots}
    todo = [(r, frozenset[str]()) for r in roots]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        for line in metadata.distribution(name).requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker and not any(req.marker.evaluate(env) for env in envs):
                continue
            dep = _name(req.name)
            seen.setdefault(dep, set()).add(name)
            todo.append((dep, frozenset(req.extras)))
    return seen


def test_no_distribution_is_pinned_twice() -> None:
    assert sorted(set(DIRECT) & set(CONSTRAINED)) == []


def test_the_pins_cover_every_dependency_of_the_tools() -> None:
    needed = _closure(sorted(DIRECT))
    unpinned = {n: sorted(by) for n, by in needed.items() if n not in DIRECT | CONSTRAINED}
    assert unpinned == {}, "pin these in constraints-dev.txt (name: required by)"


def test_the_pins_are_what_this_environment_runs() -> None:
    wrong = {
        name: (pinned, metadata.version(name))
        for name, pinned in (DIRECT | CONSTRAINED).items()
        if metadata.version(name) != pinned
    }
    assert wrong == {}, "name: (pinned, installed)"


def test_the_venv_installs_with_the_constraints() -> None:
    make = (ROOT / "Makefile").read_text()
    assert "-r requirements-dev.txt -c constraints-dev.txt" in make
    # The venv's own pip too: a pip release changes resolution and output for every install.
    assert "--upgrade pip -c constraints-dev.txt" in make
    assert "pip" in CONSTRAINED
