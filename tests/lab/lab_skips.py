"""Which skips a lab session may end with: tests/lab/conftest.py fails the session on any other.

Nothing green with nothing run: a lab run whose tests skip proves nothing, so a skip is
an error unless it is declared here, with the condition under which it is expected. On
the default lab (what `make test-lab` and CI bring up: GPUPROV_LAB_HOSTS unset or
"default", a fresh lab) every module finds the hosts it needs and no lab test skips
(the last CI run before this check: 48 passed, 0 skipped in `make test-lab`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_PRESET = "default"  # GPUPROV_LAB_HOSTS's default (tests/lab/conftest.py)

# Reason prefixes, and when each is expected.
# Always: test_site.py's later tests need the converge of test_site_converges, which failed
# (the session is red for that already) or was not selected (-k).
ALWAYS = ("site.yml did not converge",)
# A kept lab (GPUPROV_LAB_KEEP=1) is not fresh: test_site.py's `site.yml --check` on fresh
# hosts cannot run on a second session.
KEPT = ("hosts not fresh (docker.io installed on ",)
# A lab of other hosts (GPUPROV_LAB_HOSTS other than the default preset): the modules that
# need a kind of host that lab lacks.
OTHER_HOSTS = (
    "the lab has no k40m host",  # test_site.py
    "needs a bookworm GPU-profile host and a bookworm cpu host",  # test_pytorch_smoke.py
    "needs two bookworm hosts",  # test_launch_monitoring.py
    "no bookworm host in this lab",  # test_model_serving.py, test_notebook_storage.py
    "no bookworm K40m host in this lab",  # test_model_serving.py
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
