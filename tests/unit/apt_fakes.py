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
            "lock_timeout": 0,
            "stamp": "",
            **params,
        }
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def fail_json(self, **kwargs: Any) -> None:
        raise Failed(kwargs)


class Script:
    """A command runner that answers from a list of (argv prefix, rc, stdout) rules, in order
    (apt_ready reads stdout and stderr together, so one text stands for both)."""

    def __init__(self, rules: list[tuple[tuple[str, ...], int, str]]) -> None:
        self.rules = rules
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(tuple(argv))
        for i, (prefix, rc, out) in enumerate(self.rules):
            if tuple(argv[: len(prefix)]) == prefix:
                if len([r for r in self.rules if r[0] == prefix]) > 1:
                    self.rules.pop(i)  # repeated rules answer in turn
                return rc, out, ""
        return 0, "", ""

    def ran(self, *prefix: str) -> bool:
        return any(c[: len(prefix)] == prefix for c in self.calls)
