"""Which skips a lab session may end with: tests/lab/conftest.py fails the session on any other.

Nothing green with nothing run: a lab run whose tests skip proves nothing, so a skip is
an error unless it is declared here, with the condition under which it is expected. On
the default lab (what `make test-lab` and CI bring up: GPUPROV_LAB_HOSTS unset or
"default", a fresh lab) every module finds the hosts it needs and no lab test skips
(the last CI run before this check: 48 passed, 0 skipped in `make test-lab`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping

DEFAULT_PRESET = "default"  # GPUPROV_LAB_HOSTS's default (tests/lab/conftest.py)

# Reason prefixes, and when each is expected.
# Always: test_site.py's later tests need the converge of test_site_converges, which failed
# (the session is red for that already) or was not selected (-k).
ALWAYS = ("site.yml did not converge",)
# A kept lab (GPUPROV_LAB_KEEP=1) is not fresh: test_site.py's `site.yml --check` on fresh
# hosts cannot run on a second session.
KEPT = (
    "hosts not fresh (docker.io installed on ",
    # test_model_serving.py: a lab converged before site.yml started installs in the background
    "Triton environment older than the background install",
)
# A lab of other hosts (GPUPROV_LAB_HOSTS other than the default preset): the modules that
# need a kind of host that lab lacks.
OTHER_HOSTS = (
    "the lab has no k40m host",  # test_site.py
    "needs a bookworm GPU-profile host and a bookworm cpu host",  # test_pytorch_smoke.py
    "needs two bookworm hosts",  # test_launch_monitoring.py
    "no bookworm host in this lab",  # test_model_serving.py, test_jupyterlab_storage.py
    "no bookworm K40m host in this lab",  # test_model_serving.py
    "no host of this lab serves",  # test_model_serving.py (the K40m host serves)
    "every torch host of this lab serves",  # test_model_serving.py
    "no notebook server in this lab",  # test_jupyterlab_storage.py (lab-k40m runs one)
    "every host of this lab runs a notebook server",  # test_jupyterlab_storage.py
    "no storage clients in this lab",  # test_jupyterlab_storage.py (lab-k40m and trixie get them)
    "every host of this lab has storage clients",  # test_jupyterlab_storage.py
    # test_jupyterlab_storage.py (lab-k40m has both)
    "no host with both a torch environment and storage clients in this lab",
    "needs two GPU nodes",  # test_site.py's unreachable-host test
    "needs a trixie host",  # test_pull.py
    "needs a Debian 12 K40m node",  # test_offline_bundle.py
)


def expected_skips(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The reason prefixes a lab session run with this environment may skip with."""
    allowed = [*ALWAYS]
    if environ.get("GPUPROV_LAB_KEEP", "") == "1":
        allowed += KEPT
    if environ.get("GPUPROV_LAB_HOSTS", DEFAULT_PRESET) != DEFAULT_PRESET:
        allowed += OTHER_HOSTS
    return tuple(allowed)


def skip_reason(longrepr: object) -> str:
    """The reason of a skipped test's report (pytest keeps it as (file, line, "Skipped: ..."))."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    return str(text).removeprefix("Skipped: ")


def unexpected_skips(
    skips: Iterable[tuple[str, str]], environ: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The (test id, reason) pairs whose reason is not one this environment expects."""
    allowed = expected_skips(environ)
    return [(test, reason) for test, reason in skips if not reason.startswith(allowed)]


# The testinfra suite (tests/infra) on the default lab: per host and module, exactly the skip
# reasons (up to the first " (") the lab's inventory decides (inventories/lab,
# scripts/gpuprov_lab/inventory.py). test_site.py compares the suite's JUnit report with this
# table: a skip not listed, or a listed one that no longer happens, fails. lab-k40m turns on the
# options the roles leave off (group_vars/gpu_k40m.yml), so each of those checks runs on one host;
# the other hosts keep the defaults. Left: the driver's kernel checks (a container loads no
# kernel module) and --docker-preserved-key (an option the fault cases pass).
_DOCKER_DEFAULTS = {
    "docker_daemon_options is empty",
    "docker_package_hold is false",
    "docker_users is empty",
    "no --docker-preserved-key given",
}
_TOOLKIT_DEFAULTS = {
    "containerd is not a configured runtime",
    "no CDI spec expected",
    "docker_daemon_options is empty",
    "nvidia_container_toolkit_package_hold is false",
}
# Only lab-k40m serves and runs a notebook server (group_vars/all/model_serving.yml and
# notebook.yml); the other torch hosts have neither.
_NO_STACKS = {"model_serving_stacks is empty on this host"}
_NO_NOTEBOOK = {"jupyterlab_method: none on this host"}
# Storage clients on lab-k40m and the trixie host only (group_vars/all/storage.yml).
_NO_STORAGE = {"object_storage_method: none on this host"}
_NO_TORCH = {  # the trixie host: the lab's torch wheel is cp311 (group_vars/all/pytorch.yml)
    "test_jupyterlab": _NO_NOTEBOOK,
    "test_launch": {"not in dist_launch_hosts"},
    "test_pytorch": {"pytorch_method: none"},
    "test_serving": _NO_STACKS,
}
INFRA_DEFAULT: dict[str, dict[str, set[str]]] = {
    "lab-cpu": {
        "test_docker": _DOCKER_DEFAULTS,
        "test_driver": {"not in gpu_nodes"},
        "test_toolkit": {"not in gpu_nodes"},
        "test_jupyterlab": _NO_NOTEBOOK,
        "test_object_storage": _NO_STORAGE,
        "test_serving": _NO_STACKS,
    },
    "lab-k40m": {  # group_vars/gpu_k40m.yml turns on what the roles leave off by default
        "test_docker": {"no --docker-preserved-key given"},
        "test_driver": {"container"},
    },
    "lab-m40": {
        "test_docker": _DOCKER_DEFAULTS,
        "test_driver": {"container"},
        "test_toolkit": _TOOLKIT_DEFAULTS,
        **_NO_TORCH,
    },
    "lab-mixed": {
        "test_docker": _DOCKER_DEFAULTS,
        "test_driver": {"container"},
        "test_toolkit": _TOOLKIT_DEFAULTS,
        "test_jupyterlab": _NO_NOTEBOOK,
        "test_object_storage": _NO_STORAGE,
        "test_serving": _NO_STACKS,
    },
}


def _infra_cases(
    junit_xml: str, hosts: Iterable[str]
) -> Iterator[tuple[str | None, str, str, ET.Element]]:
    """(host, module, test function, case) per case of a testinfra JUnit report; host is None
    for a case that names no ansible:// host."""
    names = sorted(hosts, key=len, reverse=True)  # lab-m40 before lab-m4...
    for case in ET.fromstring(junit_xml).iter("testcase"):  # noqa: S314  # our pytest's report
        name = case.get("name", "")
        module = case.get("classname", "").rsplit(".", 1)[-1]
        match = re.search(r"\[ansible://([^\]]+)\]", name)
        if match is None:
            yield None, module, name, case
            continue
        host = next((h for h in names if match.group(1).startswith(h)), None)
        if host is None:
            raise ValueError(f"testinfra case of an unknown host: {name}")
        yield host, module, name.split("[", 1)[0], case


def infra_skips(junit_xml: str, hosts: Iterable[str]) -> dict[str, dict[str, set[str]]]:
    """host -> module -> skip reasons (up to the first " (") of a testinfra JUnit report."""
    found: dict[str, dict[str, set[str]]] = {}
    for host, module, test, case in _infra_cases(junit_xml, hosts):
        skipped = case.find("skipped")
        if skipped is None:
            continue
        if host is None:
            raise ValueError(f"testinfra case without a host: {test}")
        reason = skipped.get("message", "").split(" (", 1)[0].strip()
        found.setdefault(host, {}).setdefault(module, set()).add(reason)
    return found


def infra_passed(junit_xml: str, hosts: Iterable[str]) -> dict[str, set[str]]:
    """host -> "module.py::test" of the cases that passed on it (no skipped, failure or error)."""
    found: dict[str, set[str]] = {}
    for host, module, test, case in _infra_cases(junit_xml, hosts):
        if host is None or any(
            case.find(tag) is not None for tag in ("skipped", "failure", "error")
        ):
            continue
        found.setdefault(host, set()).add(f"{module}.py::{test}")
    return found
