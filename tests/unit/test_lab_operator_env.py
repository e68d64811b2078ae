"""The lab's tools in an operator's shell as it is (issue 20, item 5).

An operator who works with a real fleet exports ANSIBLE_VAULT_PASSWORD_FILE (README, "Run
with a vault"), and may export ANSIBLE_CONFIG and ANSIBLE_INVENTORY. The lab has its own of
each; these tests run the real ansible-vault and ansible-playbook the lab runs, with such a
shell, in a tmp directory. Before the fix, `lab.py up` stopped at `ansible-vault encrypt`
(exit 5: two "default" vault ids) and a lab run used the operator's password file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gpuprov_lab import common, s3lab, site

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

DATA = {"vault_lab_s3_keys": {"lab-a": {"access_key": "AK", "secret_key": "SK"}}}


def _operator_shell(tmp_path: Path) -> dict[str, str]:
    """What an operator's shell may export: another vault password, config and inventory."""
    own = tmp_path / "operator"
    own.mkdir()
    (own / "vault-pass").write_text("the operator's fleet password\n")
    (own / "ansible.cfg").write_text(
        f"[defaults]\nvault_password_file = {own / 'vault-pass'}\ninventory = {own / 'hosts.yml'}\n"
    )
    return {
        "ANSIBLE_VAULT_PASSWORD_FILE": str(own / "vault-pass"),
        "ANSIBLE_CONFIG": str(own / "ansible.cfg"),
        "ANSIBLE_INVENTORY": str(own / "hosts.yml"),
        "ANSIBLE_ROLES_PATH": str(own / "roles"),
    }


def test_the_labs_vault_is_written_and_read_whatever_the_shell_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _operator_shell(tmp_path).items():
        monkeypatch.setenv(key, value)
    password = s3lab.ensure_password(tmp_path / "state")
    vault = tmp_path / "inventory" / s3lab.VAULT_FILE
    s3lab.write_vault(vault, password, DATA)
    assert vault.read_text().startswith("$ANSIBLE_VAULT;1.1;AES256\n")
    assert s3lab.read_vault(vault, password) == DATA
    # the operator's password does not open it: the lab's alone encrypted it
    assert s3lab.read_vault(vault, tmp_path / "operator" / "vault-pass") == {}


def test_a_vault_failure_is_ansible_vaults_own_line(tmp_path: Path) -> None:
    with pytest.raises(s3lab.S3LabError) as failed:
        s3lab.write_vault(tmp_path / "vault", tmp_path / "no-such-password", DATA)
    assert str(failed.value).startswith(f"ansible-vault encrypt {tmp_path / 'vault'} failed (exit ")
    assert "no-such-password" in str(failed.value)


def test_ansible_env_replaces_the_operators_settings_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site, "STATE_ROOT", tmp_path)
    (tmp_path / "with").mkdir()
    (tmp_path / "with" / "vault-password").write_text("x\n")
    shell = {
        **_operator_shell(tmp_path),
        "ANSIBLE_VAULT_IDENTITY_LIST": "fleet@/elsewhere",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "PATH": "/usr/bin",
    }
    env = site.ansible_env("with", base=shell)
    assert env == {
        "ANSIBLE_CONFIG": str(common.REPO / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "with" / "facts"),
        "ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "with" / "vault-password"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "PATH": "/usr/bin",
    }
    without = site.ansible_env("without", base=shell)
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in without
    assert not set(without) & set(common.OPERATOR_ANSIBLE_ENV) - {"ANSIBLE_CONFIG"}


def test_a_lab_playbook_run_opens_the_labs_vault_in_an_operators_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `lab.py site` and the lab tests do: ansible-playbook with ansible_env(lab), on an
    inventory whose group_vars/all/vault the lab encrypted; the shell names the operator's
    password file, config and inventory (missing here: on the old code the run stopped)."""
    monkeypatch.setattr(site, "STATE_ROOT", tmp_path / "state")
    password = s3lab.ensure_password(tmp_path / "state" / "unit")
    inventory = tmp_path / "inventory" / "hosts.yml"
    inventory.parent.mkdir()
    inventory.write_text("all:\n  hosts:\n    here:\n      ansible_connection: local\n")
    s3lab.write_vault(inventory.parent / s3lab.VAULT_FILE, password, {"vault_probe": "opened"})
    playbook = tmp_path / "probe.yml"
    playbook.write_text(
        "- name: Probe\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Show the vaulted value\n      ansible.builtin.debug:\n"
        "        msg: 'probe={{ vault_probe }}'\n"
    )
    shell = _operator_shell(tmp_path)
    (tmp_path / "operator" / "vault-pass").unlink()  # an operator file missing on this machine
    env = site.ansible_env("unit", base=shell | {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    proc = subprocess.run(
        [site.ansible_tool("ansible-playbook"), "-i", str(inventory), str(playbook)],
        env=env,
        cwd=common.REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "probe=opened" in proc.stdout
