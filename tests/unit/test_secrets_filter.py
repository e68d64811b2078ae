"""The secret filter (plugins/filter/gpuprov_secrets.py): reasons name the variable only."""

from __future__ import annotations

from pathlib import Path

import gpuprov_secrets as secrets_filter  # plugins/filter/gpuprov_secrets.py (pythonpath)
import pytest

ANY_ADDRESS = "0.0.0.0"  # noqa: S104 (the bind address these tests refuse or allow)

ROOT = Path(__file__).resolve().parents[2]


PLACEHOLDERS = ["changeme", "password"]
LOOKS = "tok looks like a placeholder (a template, <...> or one repeated char)"
KNOWN = "tok is a known placeholder, not a secret"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ['tok is empty (set it from Vault, e.g. tok: "{{ vault_tok }}")']),
        (None, ['tok is empty (set it from Vault, e.g. tok: "{{ vault_tok }}")']),
        ("short-but-real", ["tok is 14 characters long; the minimum is 16"]),
        ("ChangeMe", [KNOWN, "tok is 8 characters long; the minimum is 16"]),
        ("AKIAIOSFODNN7EXAMPLE", [KNOWN]),
        ("<your-token-goes-here>", [LOOKS]),
        ("aaaaaaaaaaaaaaaaaaaa", [LOOKS]),
        ("Zq3-9xLw_Pp0t8RkV2mN", []),
    ],
    ids=["empty", "none", "short", "placeholder", "aws-example", "angle", "repeated", "good"],
)
def test_secret_problems(value: str | None, expected: list[str]) -> None:
    assert secrets_filter.secret_problems(value, "tok", 16, PLACEHOLDERS) == expected


def test_reasons_never_contain_the_value() -> None:
    value = "changeme"
    reasons = secrets_filter.secret_problems(value, "tok", 64, PLACEHOLDERS)
    assert reasons
    assert all(value not in r.lower().replace("tok", "") for r in reasons)


def test_filter_is_registered() -> None:
    assert "gpuprov_secret_problems" in secrets_filter.FilterModule().filters()


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        (ANY_ADDRESS, False),
        ("::", False),
        ("10.0.0.5", False),
        ("gpu01", False),
        ("", False),
        (None, False),
    ],
)
def test_is_loopback(address: object, loopback: bool) -> None:
    assert secrets_filter.is_loopback(address) is loopback


def test_no_role_keeps_its_own_list_of_loopback_addresses() -> None:
    """One rule for "stays on the host" (the filter, also used by inventory_check)."""
    roots = ROOT / "roles"
    copies = [
        str(p)
        for p in roots.rglob("*.yml")
        if "'::1'" in p.read_text(encoding="utf-8") or '"::1"' in p.read_text(encoding="utf-8")
    ]
    assert copies == []
