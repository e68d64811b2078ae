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
    the bundle URL the client wrote last), and returns what C([global]) should hold.
  - C(index_foreign) is the C(index-url) someone else set (not the bundle's, not the one the
    client wrote for an earlier bundle URL), or empty. The client refuses to replace it unless
    told to.
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


def _host(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def _earlier_base(sources_text: str) -> str:
    """The bundle URL of the client's own source file (URIs: <base>/apt), or empty."""
    for line in sources_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "URIs" and value.strip().endswith("/apt"):
            return value.strip()[: -len("/apt")]
    return ""


def pip_conf(text: str, sources_text: str, base_url: str, over_http: bool) -> dict[str, Any]:
    """{index_foreign, trusted_host, error} for the bundle at ``base_url`` (see DOCUMENTATION)."""
    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read_string(text or "", source="/etc/pip.conf")
    except configparser.Error as exc:
        return {"index_foreign": "", "trusted_host": "", "error": str(exc).splitlines()[0]}
    index = f"{base_url.rstrip('/')}/simple/"
    earlier = _earlier_base(sources_text)
    ours = {index.rstrip("/")} | ({f"{earlier}/simple"} if earlier else set())
    current = parser.get("global", "index-url", fallback="").strip()
    foreign = current if current and current.rstrip("/") not in ours else ""
    ours_hosts = {_host(base_url)} | ({_host(earlier)} if earlier else set())
    listed = parser.get("global", "trusted-host", fallback="").split()
    hosts = [h for h in dict.fromkeys(listed) if h not in ours_hosts]
    if over_http:
        hosts.append(_host(base_url))
    return {"index_foreign": foreign, "trusted_host": " ".join(hosts), "error": ""}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_pip_conf": pip_conf}
