"""Stand-ins for AnsibleModule and for dpkg/apt, shared by the apt_ready unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class FakeModule:
    """The slice of AnsibleModule that AptReady uses."""

    def __init__(self, check_mode: bool = False, **params: Any) -> None:
        self.params: dict[str, Any] = {
            "repair": True,
            "update": "auto",
            "valid_time": 3600,
            "packages": [],
            "download": False,
            "sources": {},
            "keyrings": {},
            "fingerprints": {},
            "owned": {},
            "backup_dir": "/nonexistent/backups",
            "stale_keys": "fail",
            "lock_timeout": 0,
            "stamp": "",
            "state_dir": "",
            **params,
        }
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def fail_json(self, **kwargs: Any) -> None:
        raise Failed(kwargs)


Rule = tuple[tuple[str, ...], int, str]

# What a clean host answers: dpkg has nothing to report, nothing is held, the update fetches.
CLEAN: list[Rule] = [(("dpkg", "--audit"), 0, ""), (("apt-mark", "showhold"), 0, "")]
UPDATE_OK: Rule = (
    ("apt-get", "update"),
    0,
    "Hit:1 http://deb.debian.org/debian bookworm InRelease\nReading package lists...\n",
)


class Script:
    """A command runner that answers from a list of (argv prefix, rc, stdout) rules, in order
    (apt_ready reads stdout and stderr together, so one text stands for both). A command no
    rule matches fails the test: every command the module runs is one the test declared."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = list(rules)
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(tuple(argv))
        for i, (prefix, rc, out) in enumerate(self.rules):
            if tuple(argv[: len(prefix)]) == prefix:
                if len([r for r in self.rules if r[0] == prefix]) > 1:
                    self.rules.pop(i)  # repeated rules answer in turn
                return rc, out, ""
        raise AssertionError(f"unexpected command (no rule in the test's Script): {list(argv)}")

    def ran(self, *prefix: str) -> bool:
        return any(c[: len(prefix)] == prefix for c in self.calls)
