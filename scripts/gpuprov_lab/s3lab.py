"""The lab's S3 server and throwaway Vault: a real, signature-checking stand-in for MinIO/AWS.

MinIO's server cannot be downloaded here, so the lab runs **moto's server** (PyPI ``moto[server]``,
pinned below) with authentication on: ``INITIAL_NO_AUTH_ACTION_COUNT`` lets exactly the first
IAM calls through unauthenticated (one user, one policy, one access key per lab profile);
every later request must carry a SigV4 signature made with a key moto issued, and moto answers
``InvalidAccessKeyId`` / ``SignatureDoesNotMatch`` otherwise (checked at lab-up). It is NOT
MinIO or AWS: only the S3 API subset moto implements, in memory.

- the packages are installed once per machine with ``pip install --target`` under
  ``$XDG_CACHE_HOME/gpuprov/lab/moto-<version>-<python>/`` (``~/.cache`` without it: a new
  lab, a fresh clone's among them, takes 23 s less to come up) and mounted read-only into a
  ``NAME-s3`` container of the lab's bookworm image (Python 3.11, as on the controller), on
  the lab network only, no published port;
- the key pairs moto issued and a notebook token are written, ansible-vault encrypted with a
  throwaway password (``.lab/NAME/vault-password``, mode 0600, outside git), to
  ``<inventory dir>/group_vars/all/vault`` (an extension-less file: Ansible loads it, the lab's
  group_vars reader skips it);
- :func:`inventory_vars` gives the plain (non-secret) lab variables: the endpoint URL.

moto keeps its state in memory: when the container was restarted, the stored keys fail the
check at ``up`` and the server and keys are made anew.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import yaml

from compat.data import cache_dir
from gpuprov_lab.common import lab_tool_env

MOTO_VERSION = "5.2.5"
S3_PORT = 5000
S3_LABEL = "gpuprov.lab.s3"
PKG_DIR = "/opt/gpuprov-moto"
# The lab's storage profiles: name -> (IAM user, bucket, region).
PROFILES: dict[str, tuple[str, str, str]] = {
    "lab-a": ("gpuprov-lab-a", "gpuprov-probe-a", "us-east-1"),
    "lab-b": ("gpuprov-lab-b", "gpuprov-probe-b", "eu-west-1"),
}
# create_user + put_user_policy + create_access_key per profile, nothing more.
NO_AUTH_ACTIONS = 3 * len(PROFILES)
VAULT_FILE = Path("group_vars") / "all" / "vault"
VAULT_PASSWORD_NAME = Path("vault-password")  # in the lab's state directory, .lab/NAME/

# Runs inside the container (PYTHONPATH=PKG_DIR): issue one key pair per profile, then prove
# that auth is on (a wrong secret and an unknown key are refused). Prints the keys as JSON.
ISSUE_KEYS = r"""
import json, sys, boto3, botocore.config, botocore.exceptions
ep = "http://127.0.0.1:" + sys.argv[2]
users = json.loads(sys.argv[1])
iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
policy = json.dumps({"Version": "2012-10-17",
                     "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})
keys = {}
for profile, user in users.items():
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="s3-all", PolicyDocument=policy)
    k = iam.create_access_key(UserName=user)["AccessKey"]
    keys[profile] = {"access_key": k["AccessKeyId"], "secret_key": k["SecretAccessKey"]}
first = next(iter(keys.values()))
cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
for ak, sk, want in ((first["access_key"], first["secret_key"][::-1], "SignatureDoesNotMatch"),
                     ("AKIA" + "Q" * 16, first["secret_key"], "InvalidAccessKeyId")):
    s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1", aws_access_key_id=ak,
                      aws_secret_access_key=sk, config=cfg)
    try:
        s3.list_buckets()
    except botocore.exceptions.ClientError as exc:
        got = exc.response["Error"]["Code"]
        if got != want:
            sys.exit("auth check: expected " + want + ", got " + got)
    else:
        sys.exit("auth check: a wrong key pair was accepted: authentication is off")
print(json.dumps(keys))
"""

CHECK_KEYS = r"""
import json, sys, boto3, botocore.config
keys = json.loads(sys.stdin.read())
for k in keys.values():
    boto3.client("s3", endpoint_url="http://127.0.0.1:" + sys.argv[1], region_name="us-east-1",
                 aws_access_key_id=k["access_key"], aws_secret_access_key=k["secret_key"],
                 config=botocore.config.Config(s3={"addressing_style": "path"})).list_buckets()
"""


class DockerLike(Protocol):
    def run(
        self,
        args: list[str],
        *,
        check: bool = ...,
        stdin: bytes | None = ...,
        timeout: float | None = ...,
    ) -> subprocess.CompletedProcess[bytes]: ...

    def out(self, args: list[str], **kw: Any) -> str: ...

    def exists(self, kind: str, name: str) -> bool: ...

    def inspect(self, name: str) -> dict[str, Any]: ...


class S3LabError(Exception):
    """A failure of the lab's S3 server or vault (lab.py turns it into exit 1)."""


def s3_name(lab: str) -> str:
    return f"{lab}-s3"


def endpoint_url(address: str) -> str:
    return f"http://{address}:{S3_PORT}"


def run_args(lab: str, network: str, image: str, pkg_dir: Path) -> list[str]:
    """`docker run` arguments of the lab's S3 server (lab network only, no published port)."""
    return [
        "run",
        "--detach",
        "--name",
        s3_name(lab),
        "--network",
        network,
        "--label",
        f"{S3_LABEL}={lab}",
        "--read-only",
        "--tmpfs",
        "/tmp",  # noqa: S108 (the container's own tmpfs)
        "--mount",
        f"type=bind,source={pkg_dir},target={PKG_DIR},readonly",
        "--env",
        f"PYTHONPATH={PKG_DIR}",
        "--env",
        f"INITIAL_NO_AUTH_ACTION_COUNT={NO_AUTH_ACTIONS}",
        image,
        "python3",
        "-m",
        "moto.server",
        "--host",
        "0.0.0.0",  # noqa: S104 (the container's lab-network address only)
        "--port",
        str(S3_PORT),
    ]


def package_cache() -> Path:
    """Where moto's packages are installed, once per machine (not per lab: `down` keeps them)."""
    # pip installs the wheels of the Python that runs it (the controller's, as in the container).
    tag = sys.implementation.cache_tag or f"py{sys.version_info[0]}{sys.version_info[1]}"
    return Path(cache_dir()) / "lab" / f"moto-{MOTO_VERSION}-{tag}"


def ensure_packages(target: Path) -> Path:
    """moto[server] (pinned) installed with pip --target into ``target``, once: into a
    directory beside it, renamed into place when complete (two labs coming up at once, or an
    interrupted install, never leave a half-filled one)."""
    if target.is_dir():
        return target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                str(staging),
                f"moto[server]=={MOTO_VERSION}",
            ],
            check=True,
            capture_output=True,
        )
        staging.chmod(0o755)  # mkdtemp's 0700 would hide it from the container's user
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # not another lab's complete install: a real error
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target.resolve()


def _ansible_vault() -> str:
    local = Path(sys.executable).parent / "ansible-vault"
    return str(local) if local.exists() else "ansible-vault"


def ensure_password(state_dir: Path) -> Path:
    """The lab's throwaway vault password (0600, under .lab/NAME/, never in git)."""
    path = state_dir / VAULT_PASSWORD_NAME
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path.resolve()


def read_vault(path: Path, password: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    proc = subprocess.run(
        [_ansible_vault(), "view", "--vault-password-file", str(password), str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=lab_tool_env(),  # the lab's password only, whatever the operator's shell exports
    )
    if proc.returncode != 0:
        return {}
    data = yaml.safe_load(proc.stdout) or {}
    return dict(data) if isinstance(data, dict) else {}


def write_vault(path: Path, password: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    proc = subprocess.run(
        [
            _ansible_vault(),
            "encrypt",
            "--vault-password-file",
            str(password),
            "--output",
            str(tmp),
            "-",
        ],
        input="---\n" + yaml.safe_dump(data, sort_keys=True),
        text=True,
        capture_output=True,
        check=False,
        env=lab_tool_env(),  # one vault id: an exported ANSIBLE_VAULT_PASSWORD_FILE made two
    )
    if proc.returncode != 0:
        said = [line for line in proc.stderr.splitlines() if "ERROR" in line] or [
            (proc.stderr.strip().splitlines() or ["no message"])[-1]
        ]
        raise S3LabError(
            f"ansible-vault encrypt {path} failed (exit {proc.returncode}): {said[0].strip()}"
        )
    tmp.chmod(0o600)
    tmp.replace(path)


def _wait_listening(docker: DockerLike, name: str, timeout: float = 60) -> None:
    probe = f"import socket; socket.create_connection(('127.0.0.1', {S3_PORT}), timeout=1).close()"
    deadline = time.monotonic() + timeout
    while docker.run(["exec", name, "python3", "-c", probe], check=False).returncode != 0:
        if time.monotonic() > deadline:
            logs = docker.out(["logs", "--tail", "20", name], check=False)
            raise S3LabError(f"{name}: moto server not listening after {timeout:.0f}s\n{logs}")
        time.sleep(0.5)


def _keys_work(docker: DockerLike, name: str, keys: dict[str, Any]) -> bool:
    proc = docker.run(
        [
            "exec",
            "-i",
            "--env",
            f"PYTHONPATH={PKG_DIR}",
            name,
            "python3",
            "-c",
            CHECK_KEYS,
            str(S3_PORT),
        ],
        check=False,
        stdin=json.dumps(keys).encode(),
    )
    return proc.returncode == 0


def ensure(
    docker: DockerLike, lab: str, state_dir: Path, inventory_dir: Path, network: str, image: str
) -> dict[str, Any]:
    """Serve S3 on the lab network and vault its keys and a notebook token; return plain vars."""
    pkg_dir = ensure_packages(package_cache())
    password = ensure_password(state_dir)
    vault_path = inventory_dir / VAULT_FILE
    stored = read_vault(vault_path, password)
    name = s3_name(lab)
    keys = stored.get("vault_lab_s3_keys") or {}
    running = docker.exists("container", name) and docker.inspect(name)["State"].get("Running")
    if running:
        _wait_listening(docker, name)
    if not (running and set(keys) == set(PROFILES) and _keys_work(docker, name, keys)):
        docker.run(["rm", "-f", name], check=False)
        docker.run(run_args(lab, network, image, pkg_dir))
        _wait_listening(docker, name)
        users = json.dumps({p: u for p, (u, _, _) in PROFILES.items()})
        proc = docker.run(
            [
                "exec",
                "--env",
                f"PYTHONPATH={PKG_DIR}",
                name,
                "python3",
                "-c",
                ISSUE_KEYS,
                users,
                str(S3_PORT),
            ],
            check=False,
        )
        if proc.returncode != 0:
            raise S3LabError(f"{name}: issuing keys failed: {proc.stderr.decode()[-800:]}")
        keys = json.loads(proc.stdout)
    wanted = {
        "vault_lab_s3_keys": keys,
        "vault_jupyterlab_token": stored.get("vault_jupyterlab_token") or secrets.token_urlsafe(32),
    }
    if wanted != stored:
        write_vault(vault_path, password, wanted)
    nets = docker.inspect(name)["NetworkSettings"]["Networks"]
    address = (nets.get(network) or {}).get("IPAddress")
    if not address:
        raise S3LabError(f"{name}: no address on {network}")
    return inventory_vars(endpoint_url(address))


def inventory_vars(endpoint: str) -> dict[str, Any]:
    """Plain (non-secret) lab variables: where the S3 stand-in listens, and its profiles."""
    return {
        "lab_s3_endpoint": endpoint,
        "lab_s3_profiles": {p: {"bucket": b, "region": r} for p, (_, b, r) in PROFILES.items()},
    }


def remove(docker: DockerLike, lab: str) -> None:
    ids = docker.out(["ps", "-aq", "--filter", f"label={S3_LABEL}={lab}"]).split()
    if ids:
        docker.run(["rm", "-f", *ids])
