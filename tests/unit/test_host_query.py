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


def _which(*found: str):  # type: ignore[no-untyped-def]
    return lambda name: f"/usr/bin/{name}" if name in found else None


def test_dpkg_is_read_where_its_database_is_and_rpm_otherwise(tmp_path: Path) -> None:
    """An EL host with EPEL's dpkg-query has an empty dpkg database (its package creates an
    empty status file): its packages are rpm's. Before 2026-12-06 gpuprov_state read dpkg
    wherever dpkg-query was, and gpuprov_installed wherever the status file was: both found
    every package absent there, and the fast path never found a role converged."""
    empty, debian, none = tmp_path / "empty", tmp_path / "debian", tmp_path / "none"
    empty.mkdir()
    debian.mkdir()
    (empty / "status").write_text("", encoding="ascii")
    (debian / "status").write_text("Package: dpkg\n", encoding="ascii")
    both = _which("dpkg-query", "rpm")
    assert host_query.package_manager(str(debian), both) == "dpkg"
    assert host_query.package_manager(str(empty), both) == "rpm"
    assert host_query.package_manager(str(debian), _which("rpm")) == "rpm"
    assert host_query.package_manager(str(debian), _which("dpkg-query")) == "dpkg"
    assert host_query.package_manager(str(empty), _which("dpkg-query")) is None
    assert host_query.package_manager(str(debian), _which()) is None
    assert host_query.package_manager(str(none), both) == "rpm"


@pytest.mark.parametrize("name", USERS)
def test_the_modules_do_not_spell_the_queries_again(name: str) -> None:
    source = (ROOT / "plugins" / "modules" / name).read_text(encoding="utf-8")
    assert "import host_query as _hq" in source
    assert "_hq.package_manager(" in source, f"{name}: choose dpkg or rpm with host_query"
    for copy in (
        "${db:Status-Abbrev}",
        "%{NAME}",
        '"systemctl", "show"',
        'split("\\n\\n")',
        '"dpkg-query")',
        '"default": "/var/lib/dpkg"',  # the argument spec's default is _hq.DPKG_ADMINDIR
    ):
        assert copy not in source, f"{name} spells {copy!r} again: use module_utils/host_query"
