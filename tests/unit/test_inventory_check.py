"""Unit tests for plugins/action/inventory_check.py: the inventory validation of validate_inventory.

The table is derived from the roles' meta/argument_specs.yml; these tests check that every
declared variable is really validated, and run the bad-input corpus
(tests/lab/bad_inputs.yaml) through the same code, with the real compat matrix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gpu_compat as filters  # plugins/filter/gpu_compat.py (on pytest's pythonpath)
import gpuprov_secrets  # plugins/filter/gpuprov_secrets.py: the roles' own rules
import inventory_check_action as check  # plugins/action/inventory_check.py (tests/unit/conftest.py)
import pytest
import yaml

import compat

ANY_ADDRESS = "0.0.0.0"  # noqa: S104 (the bind address these tests refuse or allow)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
CORPUS = yaml.safe_load((ROOT / "tests" / "lab" / "bad_inputs.yaml").read_text())
VI_VARS = yaml.safe_load((ROLES / "validate_inventory" / "vars" / "main.yml").read_text())


def _matrix() -> Any:
    """The same adapter as the plugin's filter_matrix, over the filter functions themselves."""
    from ansible.errors import AnsibleFilterError

    def torch_error(spec: str) -> str | None:
        try:
            filters.gpu_compat_check([], spec)
        except AnsibleFilterError as exc:
            return check._first_line(exc)
        return None

    def branch_error(number: int) -> str | None:
        verdict = filters.gpu_compat_branch_check(number, [])
        return None if verdict["ok"] else "; ".join(verdict["reasons"])

    variants = frozenset(v.name for r in compat.load().releases for v in r.variants)
    return check.Matrix(
        torch_error, branch_error, lambda n: bool(filters.gpu_compat_gpu(n)), variants
    )


MATRIX = _matrix()
SHARED = check.Shared(
    gpuprov_secrets.secret_problems,
    gpuprov_secrets.is_loopback,
    check.serving_port_variables(ROOT / "roles"),
)
TABLE = check.build_table(
    ROLES, VI_VARS["_validate_inventory_types"], VI_VARS["_validate_inventory_rules"]
)
REMOVED = VI_VARS["_validate_inventory_removed"]


def _spec_options() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        doc = yaml.safe_load(path.read_text())
        for name, opt in doc["argument_specs"]["main"]["options"].items():
            out.append((path.parents[1].name, name, opt))
    return out


SPEC_OPTIONS = _spec_options()
WRONG = {"bool": "yes", "int": "many", "str": 123, "path": "relative/dir", "list": "x", "dict": "x"}


def test_the_table_covers_every_declared_variable() -> None:
    declared = {name for _, name, _ in SPEC_OPTIONS}
    assert len(declared) > 90  # all roles' specs, not a hand-kept subset
    assert declared <= set(TABLE)


@pytest.mark.parametrize(
    ("role", "name", "opt"), SPEC_OPTIONS, ids=[f"{r}.{n}" for r, n, _ in SPEC_OPTIONS]
)
def test_every_declared_variable_is_validated(role: str, name: str, opt: dict[str, Any]) -> None:
    kind = opt["type"]
    assert kind in WRONG, f"{role}: {name} has type {kind}, which the check cannot test"
    lines = check.check_host("h", {name: WRONG[kind]}, TABLE, REMOVED, None)
    assert len(lines) == 1
    assert lines[0].startswith(f"h: {name} = ")
    assert "allowed" in lines[0]


@pytest.mark.parametrize(
    ("role", "name", "opt"),
    [o for o in SPEC_OPTIONS if "{{" not in str(o[2].get("default"))],
    ids=[f"{r}.{n}" for r, n, o in SPEC_OPTIONS if "{{" not in str(o.get("default"))],
)
def test_every_default_is_valid(role: str, name: str, opt: dict[str, Any]) -> None:
    assert check.check_host("h", {name: opt.get("default")}, TABLE, REMOVED, MATRIX) == []


CONTROLLER = [e for e in CORPUS if e.get("stage", "controller") == "controller"]


def test_the_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 25
    assert len({next(iter(e["vars"])) for e in CONTROLLER}) >= 25


@pytest.mark.parametrize("entry", CONTROLLER, ids=[str(e["vars"])[:60] for e in CONTROLLER])
def test_bad_input_is_one_line_naming_variable_value_and_what_is_allowed(
    entry: dict[str, Any],
) -> None:
    lines = check.check_host("lab-k40m", entry["vars"], TABLE, REMOVED, MATRIX, SHARED)
    assert lines, f"accepted: {entry['vars']}"
    hits = [line for line in lines if entry["expect"] in line]
    assert hits, lines
    for line in lines:
        assert "\n" not in line
        assert "argument_spec" not in line
        assert "Finalization" not in line


def test_good_values_pass() -> None:
    values = {
        "nvidia_driver_branch": 535,
        "nvidia_driver_reboot_timeout": "900",
        "docker_source": "docker-ce",
        "docker_proxy_env": {"https_proxy": "http://proxy:3128"},
        "nvidia_container_toolkit_runtimes": ["docker", "containerd"],
        "pytorch_torch_version": "2.5.1",
        "pytorch_variant": "cu124",
        "gpuprov_torch_version": "2.5.1+cu124",
        "pytorch_find_links": "/opt/wheels",
        "gpu_smoke_expected": {"count": 2, "model": ["Tesla K40m", "Tesla M40"]},
        "gpuprov_expect_gpu": False,
        "gpuprov_plan": {"set": "by plan.yml"},
        "lab_profile": "k40m",
        "jupyterlab_token": "q" * 20 + "w" * 20,
        "jupyterlab_bind_address": ANY_ADDRESS,
        "jupyterlab_tls_cert": "/etc/ssl/nb.pem",
        "jupyterlab_tls_key": "/etc/ssl/nb.key",
        "gpu_monitoring_listen_address": "10.0.0.5",
        "model_serving_bind_address": "gpu01.example.org",
        "model_serving_stacks": ["flask", "torchserve"],
        "model_serving_flask_port": 5001,
        "object_storage_profiles": [{"name": "lab", "endpoint_url": "http://127.0.0.1:9000"}],
    }
    assert check.check_host("h", values, TABLE, REMOVED, MATRIX, SHARED) == []
    # A notebook bound to the network with the explicit opt-out, and ::1, pass too.
    for bind in ({"jupyterlab_allow_plaintext_network": True}, {}):
        address = ANY_ADDRESS if bind else "::1"
        opened = {"jupyterlab_bind_address": address, **bind}
        assert check.check_host("h", opened, TABLE, REMOVED, MATRIX, SHARED) == []
    # Serving writes its address into host:port forms as given: [::1] is its IPv6 form.
    serving = {"model_serving_bind_address": "[::1]"}
    assert check.check_host("h", serving, TABLE, REMOVED, MATRIX, SHARED) == []
    # A host without notebooks is not judged on the notebook's token.
    quiet = {"jupyterlab_method": "none", "jupyterlab_token": "changeme"}
    assert check.check_host("h", quiet, TABLE, REMOVED, MATRIX, SHARED) == []


def test_a_secret_is_never_shown() -> None:
    lines = check.check_host("h", {"jupyterlab_token": "changeme"}, TABLE, REMOVED, None, SHARED)
    assert lines == [
        "h: jupyterlab_token = (not shown): jupyterlab_token is a known placeholder, not a "
        "secret; jupyterlab_token is 8 characters long; the minimum is 32."
    ]
    assert "changeme" not in lines[0].split("=", 1)[1].replace("jupyterlab_token", "")


def test_matrix_errors_match_the_resolver() -> None:
    """The torch message is the compat library's own, not a copy."""
    with pytest.raises(compat.model.CompatError) as err:
        compat.check([], "9.9.9")
    assert MATRIX.torch_error("9.9.9") == str(err.value)


def test_extra_types_still_work() -> None:
    table = check.build_table(ROLES, {"my_site_flag": "bool", "my_count": "int?"}, {})
    assert check.check_host("h", {"my_site_flag": "true", "my_count": None}, table, [], None) == [
        'h: my_site_flag = "true": str; allowed: a YAML boolean (true or false, unquoted).'
    ]


def test_kind_names_the_yaml_kind_of_ansible_wrapped_values() -> None:
    class _TaggedStr(str):  # what Ansible 2.19 hands a plugin for an inventory string
        __slots__ = ()

    lines = check.check_host("h", {"docker_wait_retries": _TaggedStr("x")}, TABLE, REMOVED, None)
    assert lines == ['h: docker_wait_retries = "x": str; allowed: an integer.']


def test_options_of_every_entry_point_are_known(tmp_path: Path) -> None:
    """An option declared only by another entry point than main (gpuprov_bundle's client:
    gpuprov_bundle_url) is a known variable with its type; one declared by main and another
    entry point is read from main."""
    table = check.load_specs(ROLES)
    assert table["gpuprov_bundle_url"].role == "gpuprov_bundle"
    assert table["gpuprov_bundle_url"].type == "str"
    role = tmp_path / "r" / "meta"
    role.mkdir(parents=True)
    (role / "argument_specs.yml").write_text(
        yaml.safe_dump(
            {
                "argument_specs": {
                    "aaa": {"options": {"r_x": {"type": "int"}, "r_only": {"type": "bool"}}},
                    "main": {"options": {"r_x": {"type": "str"}}},
                }
            }
        )
    )
    own = check.load_specs(tmp_path)
    assert own["r_x"].type == "str"
    assert own["r_only"].type == "bool"
