"""The declared lab skips (tests/lab/lab_skips.py), checked without a lab: which reasons each
environment expects, and that the declarations and the lab modules' pytest.skip calls agree."""

from __future__ import annotations

import ast
from pathlib import Path

import lab_skips
import pytest

HERE = Path(__file__).resolve().parent
DECLARED = (*lab_skips.ALWAYS, *lab_skips.KEPT, *lab_skips.OTHER_HOSTS)


def skip_calls() -> list[tuple[str, str]]:
    """(module:line, the literal start of the reason) of every pytest.skip call in tests/lab."""
    found = []
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "skip"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "pytest"
            ):
                arg = node.args[0]
                first = arg.values[0] if isinstance(arg, ast.JoinedStr) else arg
                assert isinstance(first, ast.Constant), f"{path.name}:{node.lineno}"
                found.append((f"{path.name}:{node.lineno}", str(first.value)))
    return found


def test_every_skip_of_a_lab_module_is_declared() -> None:
    calls = skip_calls()
    assert calls, "no pytest.skip found: the scan is broken"
    undeclared = [(where, text) for where, text in calls if not text.startswith(DECLARED)]
    assert undeclared == []


def test_every_declared_skip_is_in_a_lab_module() -> None:
    texts = [text for _, text in skip_calls()]
    stale = [prefix for prefix in DECLARED if not any(t.startswith(prefix) for t in texts)]
    assert stale == []


@pytest.mark.parametrize(
    ("environ", "allowed"),
    [
        ({}, lab_skips.ALWAYS),
        ({"GPUPROV_LAB_HOSTS": "default", "GPUPROV_LAB_KEEP": "0"}, lab_skips.ALWAYS),
        ({"GPUPROV_LAB_KEEP": "1"}, (*lab_skips.ALWAYS, *lab_skips.KEPT)),
        ({"GPUPROV_LAB_HOSTS": "small"}, (*lab_skips.ALWAYS, *lab_skips.OTHER_HOSTS)),
        (
            {"GPUPROV_LAB_HOSTS": "lab-a=k40m:bookworm", "GPUPROV_LAB_KEEP": "1"},
            (*lab_skips.ALWAYS, *lab_skips.KEPT, *lab_skips.OTHER_HOSTS),
        ),
    ],
    ids=["ci", "ci-explicit", "kept", "other-hosts", "kept-other-hosts"],
)
def test_expected_skips_follow_the_environment(
    environ: dict[str, str], allowed: tuple[str, ...]
) -> None:
    assert lab_skips.expected_skips(environ) == allowed


def test_on_the_default_lab_only_a_failed_converge_may_skip() -> None:
    skips = [
        ("test_site.py::test_testinfra_suite_passes", "site.yml did not converge"),
        ("test_site.py::test_k40m", "the lab has no k40m host (GPUPROV_LAB_HOSTS)"),
        ("test_site.py::test_check_mode_changes_nothing", "hosts not fresh (docker.io installed "),
    ]
    assert lab_skips.unexpected_skips(skips, {}) == skips[1:]
    assert lab_skips.unexpected_skips(skips, {"GPUPROV_LAB_HOSTS": "small"}) == skips[2:]


def test_skip_reason_of_a_report() -> None:
    where = ("/repo/tests/lab/test_site.py", 170, "Skipped: the lab has no k40m host")
    assert lab_skips.skip_reason(where) == "the lab has no k40m host"
    assert lab_skips.skip_reason("Skipped: x") == "x"


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.infra.test_docker" name="test_engine_package_held[ansible://lab-m40]">
<skipped type="pytest.skip" message="docker_package_hold is false">x</skipped></testcase>
<testcase classname="tests.infra.test_jupyterlab" name="test_modes[ansible://lab-m40-config]">
<skipped message="jupyterlab_method: none on this host (no PyTorch environment)">x</skipped>
</testcase>
<testcase classname="tests.infra.test_docker" name="test_engine_active[ansible://lab-m4]"/>
<testcase classname="tests.infra.test_driver" name="test_kernel[ansible://lab-m4]">
<skipped message="container (gpuprov_container_host): no kernel module to check">x</skipped>
</testcase></testsuite></testsuites>"""


def test_infra_skips_are_read_per_host_and_module_from_junit() -> None:
    """Parametrized ids append to the host (lab-m40-config); the longest host name wins."""
    assert lab_skips.infra_skips(JUNIT, ["lab-m4", "lab-m40"]) == {
        "lab-m40": {
            "test_docker": {"docker_package_hold is false"},
            "test_jupyterlab": {"jupyterlab_method: none on this host"},
        },
        "lab-m4": {"test_driver": {"container"}},
    }


def test_infra_passed_are_the_cases_without_skip_failure_or_error() -> None:
    junit = JUNIT.replace(
        "</testsuite>",
        '<testcase classname="tests.infra.test_docker" name="test_x[ansible://lab-m40]">'
        '<failure message="no">x</failure></testcase>'
        '<testcase classname="tests.infra.test_docker" name="test_y[ansible://lab-m4]">'
        '<error message="setup">x</error></testcase>'
        '<testcase classname="tests.infra.test_toolkit" name="test_cdi[ansible://lab-m40-a]"/>'
        '<testcase classname="tests.infra.test_data" name="test_no_host"/></testsuite>',
    )
    assert lab_skips.infra_passed(junit, ["lab-m4", "lab-m40"]) == {
        "lab-m4": {"test_docker.py::test_engine_active"},
        "lab-m40": {"test_toolkit.py::test_cdi"},
    }


def test_infra_skips_of_an_unknown_host_are_an_error() -> None:
    with pytest.raises(ValueError, match="unknown host"):
        lab_skips.infra_skips(JUNIT, ["lab-cpu"])


def test_the_default_lab_table_names_the_default_lab_hosts() -> None:
    from gpuprov_lab.profiles import load_lab_data

    hosts = load_lab_data().presets[lab_skips.DEFAULT_PRESET]
    assert set(lab_skips.INFRA_DEFAULT) == set(hosts)
