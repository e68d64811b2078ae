"""Behaviour of a host after the object_storage role (playbooks/storage.yml): each user's
~/.aws is theirs alone, and awscli is the pinned one in the tools venv.

pytest tests/infra/test_object_storage.py --hosts=ansible://all --ansible-inventory=INV

Hosts with object_storage_method: none (from the inventory, rendered as the play sees it) skip;
tests/lab/test_jupyterlab_storage.py checks that the role left nothing on them.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import skip_outside_play


@pytest.fixture
def storage(host: Any, object_storage_vars: dict[str, Any]) -> dict[str, Any]:
    skip_outside_play(host, "object_storage")
    values = object_storage_vars
    if values["object_storage_method"] == "none":
        reason = values.get("object_storage_skip_reason") or "no reason given"
        pytest.skip(f"object_storage_method: none on this host ({reason})")
    if not values["object_storage_users"]:
        pytest.skip("object_storage_users is empty")
    return values


@pytest.mark.parametrize("name", ["config", "credentials"])
def test_aws_files_are_private_to_each_user(
    host: Any, root: Any, storage: dict[str, Any], name: str
) -> None:
    for user in storage["object_storage_users"]:
        home = host.user(user).home
        with root():
            directory = host.file(f"{home}/.aws")
            assert directory.mode == 0o700
            assert directory.user == user
            f = host.file(f"{home}/.aws/{name}")
            assert f.mode == 0o600
            assert f.user == user


def test_awscli_is_in_the_tools_venv(host: Any, storage: dict[str, Any]) -> None:
    aws = host.file("/usr/local/bin/aws")
    assert aws.is_symlink
    assert aws.linked_to == f"{storage['object_storage_tools_venv']}/bin/aws"
    version = host.run("%s/bin/aws --version", storage["object_storage_tools_venv"])
    assert f"aws-cli/{storage['object_storage_awscli_version']} " in version.stdout + version.stderr
