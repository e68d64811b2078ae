# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filter: what the offline bundle's client writes in a host's /etc/pip.conf, merged
with what others wrote there (used by roles/gpuprov_bundle/tasks/client.yml)."""

from __future__ import annotations

import configparser
from collections.abc import Callable
from typing import Any

DOCUMENTATION = r"""
name: gpuprov_pip_conf
short_description: The bundle's index and trusted hosts merged into a host's pip.conf
description:
  - Reads the text of C(/etc/pip.conf) and of the client's own apt source file (which names
    the bundle URL the client wrote last), and returns what to change there. Option names are
    read as pip reads them (case and C(_) or C(-) alike).
  - C(index_foreign) is an index URL someone else set (not the bundle's, not the one the client
    wrote for an earlier bundle URL) in C([global]), C([install]) or C([download]) (the last
    two override C([global]) for those commands), as C(value ([section] option)), or empty.
    The client refuses to replace it unless told to.
  - C(remove) lists the C(section) and C(option) spellings the client removes, so that its
    own C(index-url) and C(trusted-host) lines in C([global]) are the ones pip reads (another
    spelling of the same option, or an index in C([install]) or C([download])).
  - C(trusted_host) is the hosts pip trusts, one space between them. The others' are kept, the
    bundle's is added over C(http) (pip ignores a plain-http index unless its host is trusted)
    and left out over C(https), the host of an earlier bundle URL the client wrote is
    dropped. Empty means the option goes.
  - C(error) names a C(pip.conf) that cannot be read as an INI file (nothing is written then).
positional: sources_text, base_url, over_http
options:
  _input:
    description: The text of /etc/pip.conf (empty when there is none).
    type: str
    required: true
  sources_text:
    description: The text of the client's own apt source file (empty when there is none).
    type: str
    required: true
  base_url:
    description: The bundle's base URL (gpuprov_bundle_url without a trailing slash).
    type: str
    required: true
  over_http:
    description: Whether the URL is plain http.
    type: bool
    required: true
"""

# pip's configuration sections that set the index for `pip install` (and `pip download`).
INDEX_SECTIONS = ("global", "install", "download")


def _host(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1].lower()
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def _plain(url: str) -> str:
    """A URL compared as pip and HTTP do: scheme and host case-blind, no trailing slash."""
    scheme, _, rest = url.strip().rstrip("/").partition("://")
    where, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{where.lower()}{slash}{path}"


def _earlier_base(sources_text: str) -> str:
    """The bundle URL of the client's own source file (URIs: <base>/apt), or empty."""
    for line in sources_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "URIs" and value.strip().endswith("/apt"):
            return value.strip()[: -len("/apt")]
    return ""


def _spelled(parser: configparser.RawConfigParser, section: str, name: str) -> list[str]:
    """The spellings of option ``name`` in ``section`` as written (pip: case, _ and - alike)."""
    if not parser.has_section(section):
        return []
    return [o for o in parser.options(section) if o.lower().replace("_", "-") == name]


def pip_conf(text: str, sources_text: str, base_url: str, over_http: bool) -> dict[str, Any]:
    """{index_foreign, remove, trusted_host, error} for the bundle at ``base_url``."""
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # spellings as written
    try:
        parser.read_string(text or "", source="/etc/pip.conf")
    except configparser.Error as exc:
        first = str(exc).splitlines()[0]
        return {"index_foreign": "", "remove": [], "trusted_host": "", "error": first}
    earlier = _earlier_base(sources_text)
    ours = {_plain(f"{base.rstrip('/')}/simple") for base in (base_url, earlier) if base}
    foreign = ""
    remove: list[dict[str, str]] = []
    for section in INDEX_SECTIONS:
        for option in _spelled(parser, section, "index-url"):
            value = parser.get(section, option).strip()
            if value and _plain(value) not in ours and not foreign:
                foreign = f"{value} ([{section}] {option})"
            if (section, option) != ("global", "index-url"):
                remove.append({"section": section, "option": option})
    ours_hosts = {_host(base) for base in (base_url, earlier) if base}
    listed: list[str] = []
    for option in _spelled(parser, "global", "trusted-host"):
        listed += parser.get("global", option).split()
        if option != "trusted-host":
            remove.append({"section": "global", "option": option})
    hosts = [h for h in dict.fromkeys(listed) if h.lower() not in ours_hosts]
    if over_http:
        hosts.append(_host(base_url))
    return {
        "index_foreign": foreign,
        "remove": remove,
        "trusted_host": " ".join(hosts),
        "error": "",
    }


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_pip_conf": pip_conf}
