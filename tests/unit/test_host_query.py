"""plugins/module_utils/host_query.py: the package and unit queries that gpuprov_installed and
gpuprov_state share (one definition; the modules' own behaviour is tested in their files)."""

from __future__ import annotations

from pathlib import Path

import host_query  # plugins/module_utils/host_query.py (pytest's pythonpath)
import pytest

ROOT = Path(__file__).resolve().parents[2]
USERS = ("gpuprov_installed.py", "gpuprov_state.py")


def test_dpkg_rows_keep_three_field_lines_only() -> None:
    out = "libfoo\t1.0\tii \nheld\t3\thi \nbroken line\n\t1\tii \nx\t1\n"
    assert host_query.dpkg_rows(out) == [("libfoo", "1.0", "ii"), ("held", "3", "hi")]


def test_rpm_rows() -> None:
    out = "docker-ce\t27.5.1-1.el9\n\nno tab\n"
    assert host_query.rpm_rows(out) == [("docker-ce", "27.5.1-1.el9")]


def test_unit_blocks_are_answered_under_the_names_asked_and_must_match() -> None:
    out = "Id=docker.service\nActiveState=active\n\nId=foo.service\nActiveState=inactive\n"
    # an alias (docker.socket asked as "dockersock") keeps the name asked
    assert host_query.unit_properties(["dockersock", "foo.service"], out) == {
        "dockersock": {"Id": "docker.service", "ActiveState": "active"},
        "foo.service": {"Id": "foo.service", "ActiveState": "inactive"},
    }
    with pytest.raises(ValueError, match="2 blocks for 3 units"):
        host_query.unit_properties(["a", "b", "c"], out)
    assert host_query.unit_properties([], "\n") == {}


def test_systemctl_show_argv_ends_options_before_the_units() -> None:
    argv = host_query.systemctl_show_argv(["-weird.service"], ("Id", "ActiveState"))
    assert argv == ["systemctl", "show", "--property=Id,ActiveState", "--", "-weird.service"]


@pytest.mark.parametrize("name", USERS)
def test_the_modules_do_not_spell_the_queries_again(name: str) -> None:
    source = (ROOT / "plugins" / "modules" / name).read_text(encoding="utf-8")
    assert "import host_query as _hq" in source
    for copy in ("${db:Status-Abbrev}", "%{NAME}", '"systemctl", "show"', 'split("\\n\\n")'):
        assert copy not in source, f"{name} spells {copy!r} again: use module_utils/host_query"
