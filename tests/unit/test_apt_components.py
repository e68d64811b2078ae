"""gpuprov_apt_missing_components (plugins/filter/gpuprov_apt.py) on apt_ready's parse of real
source files: the driver role adds only the Debian components the host's sources lack (a
repeated component makes apt warn "configured multiple times" on every update)."""

from __future__ import annotations

import apt_ready  # plugins/modules/apt_ready.py
from gpuprov_apt import missing_components

OURS = "/etc/apt/sources.list.d/gpuprov-debian-nonfree.sources"
URI = "http://deb.debian.org/debian"
SUITES = ["bookworm", "bookworm-updates"]
WANTED = ["contrib", "non-free", "non-free-firmware"]

# Debian 12's installer writes main and non-free-firmware (deb822 since trixie, one-line here).
DEBIAN12_LIST = f"""deb {URI} bookworm main non-free-firmware
deb {URI} bookworm-updates main non-free-firmware
deb http://security.debian.org/debian-security bookworm-security main non-free-firmware
"""
# debootstrap with --components=main,contrib,non-free,non-free-firmware (the lab's images)
LAB_SOURCES = f"""Types: deb
URIs: {URI}/
Suites: bookworm bookworm-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
OUR_SOURCES = f"""# Managed by gpuprov (nvidia_driver role)
Types: deb
URIs: {URI}
Suites: bookworm bookworm-updates
Components: contrib non-free non-free-firmware
"""


def _defs(files: dict[str, str]) -> list[dict[str, object]]:
    parsed = apt_ready.parse_sources(files.items())
    return [d.as_dict() for d in parsed if apt_ready.same_uri(d.uri, URI)]


def test_a_debian12_install_lacks_contrib_and_non_free() -> None:
    defs = _defs({"/etc/apt/sources.list": DEBIAN12_LIST, OURS: OUR_SOURCES})
    assert missing_components(defs, SUITES, WANTED, OURS) == {
        "bookworm": ["contrib", "non-free"],
        "bookworm-updates": ["contrib", "non-free"],
    }


def test_sources_that_enable_everything_leave_nothing_to_add() -> None:
    defs = _defs({"/etc/apt/sources.list.d/debian.sources": LAB_SOURCES, OURS: OUR_SOURCES})
    assert missing_components(defs, SUITES, WANTED, OURS) == {
        "bookworm": [],
        "bookworm-updates": [],
    }


def test_our_own_file_and_deb_src_entries_do_not_count() -> None:
    src_only = f"deb-src {URI} bookworm main contrib non-free non-free-firmware\n"
    defs = _defs({"/etc/apt/sources.list": src_only, OURS: OUR_SOURCES})
    assert missing_components(defs, ["bookworm"], WANTED, OURS) == {"bookworm": WANTED}


def test_components_are_parsed_from_both_formats() -> None:
    (one,) = apt_ready.parse_one_line(f"deb [arch=amd64] {URI} bookworm main contrib\n", "a.list")
    (stanza,) = apt_ready.parse_deb822(LAB_SOURCES, "d.sources")
    assert one.components == ("main", "contrib")
    assert stanza.components == ("main", "contrib", "non-free", "non-free-firmware")
