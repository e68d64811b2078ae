# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""One pull run of a host (roles/gpuprov_pull): take the lock, run ansible-pull, report.

Started by gpuprov-pull.service (its timer, or `systemctl start gpuprov-pull`) as
``<venv>/bin/python gpuprov_pull_run.py <config.json>``. The steps:

1. The lock (``flock`` on config["lock"], a root-only file, mode 0600, in the root-owned
   state directory: no other user can open it, so none can hold pull mode off): a second run
   while one holds it says so and stops with 0, so two runs never overlap (systemd already
   never starts the unit twice; the lock covers a run started by hand beside it).
2. ``ansible-pull`` from the repository (URL, version), the inventories inside the checkout
   and the role's per-host file, limited to this host, with the vault password file when one
   was given. Its output goes to the journal. The gpuprov_remote callback (enabled in the
   repository's ansible.cfg) writes the recap as JSON (GPUPROV_RECAP_FILE).
   ansible-pull reads its inventories twice: for its checkout step (from its working
   directory) and for the playbook (from the checkout). Its checkout step must run on the
   implicit localhost alone (with the host in an inventory it ran twice, once as localhost and
   once as the host's name, two clones into one directory), so it runs from / and every
   inventory is relative: the repository's lie in the checkout, and the per-host file is
   ``../host-inventory.yml``, beside the checkout (gpuprov_pull_prefix), which from / is
   /host-inventory.yml: absent.
   Its environment says it is a pull run (GPUPROV_PULL_RUN=1): site.yml's hold plays skip.
3. The report: host, times, exit code, verdict, the recap, the commit that ran and the
   host's plan (reports/plan/<host>.json that plan.yml wrote in the checkout), written to
   state_dir/last-run.json and, when config["report"] names an s3:// URL, uploaded to
   <prefix>/<host>/latest.json and <prefix>/<host>/<finished>.json with boto3. The S3 keys
   come only from the environment (systemd's EnvironmentFile, mode 0600) and are taken out
   of the environment of ansible-pull.

A controller run of site.yml holds pulls off while it converges the host
(playbooks/pull_hold.yml at its start, pull_release.yml at its end; they run the controller's
copy of this script, whatever copy the host has, with ``--hold CONTROLLER RUN SECONDS`` and
``--release RUN``): the hold is a file, state_dir/push-run.json, naming the controller, the
run (a token of that ansible-playbook run) and an expiry, SECONDS from now
(gpuprov_pull_push_hold: a controller run cut short holds pulls off no longer than that).
``--hold`` writes it (taking over another run's: one cut short is re-run), then tries the
lock: a pull run holds it, so the hold is taken back and the controller run refused (exit 3).
A pull run checks for the file after it takes the lock, and stops (exit 0) while one is in
force. Whichever of the two comes second sees the other. ``--release`` removes the hold of its
own run only (another run's, which took it over, stays) and says when there was none.

Exit status: ansible-pull's, and 1 when it exited 0 but the verdict is "failed" (no recap:
the repository's ansible.cfg must enable the gpuprov_remote callback); 1 when the report could
not be uploaded (naming the URL and gpuprov_pull_report_url); 2 for a config file that cannot
be read.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# The environment variables only the report needs: never handed to the playbook.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# A controller run's hold on pull runs, in the state directory.
HOLD_FILE = "push-run.json"
HOLD_REFUSED = 3  # --hold's exit status while a pull run holds the lock


class ConfigError(Exception):
    """The config file is missing a key or cannot be read."""


def inventories(config: Mapping[str, Any]) -> list[str]:
    """The inventories ansible-pull reads, in order: the repository's, then the per-host file."""
    return [str(i) for i in [*config.get("inventories", []), config.get("host_inventory", "")] if i]


def plan_path(config: Mapping[str, Any]) -> Path:
    """The host's plan that plan.yml writes in the checkout (reports/ is git-ignored)."""
    return Path(config["checkout"]) / "reports" / "plan" / f"{config['host']}.json"


def load_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc} (the gpuprov_pull role writes it; re-run it)") from exc
    missing = [
        k
        for k in ("host", "repo_url", "version", "playbook", "checkout", "venv", "lock")
        if not config.get(k)
    ]
    if missing:
        raise ConfigError(f"{path}: no {', '.join(missing)} (the gpuprov_pull role writes it)")
    absolute = [i for i in inventories(config) if i.startswith("/")]
    if absolute:
        raise ConfigError(
            f"{path}: inventories {', '.join(absolute)} are absolute: ansible-pull's"
            " checkout step would read them (relative to the checkout: gpuprov_pull_inventories)"
        )
    return dict(config)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[bool]:
    """Hold an exclusive flock on `path` for the block; yields False when another holds it."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pull_argv(config: Mapping[str, Any]) -> list[str]:
    """The ansible-pull command line of one run (no secret in it: the vault password is a file)."""
    argv = [
        str(Path(config["venv"]) / "bin" / "ansible-pull"),
        "--url", str(config["repo_url"]),
        "--checkout", str(config["version"]),
        "--directory", str(config["checkout"]),
        "--clean",
        "--full",  # a whole clone: git's dumb HTTP (a bucket, a plain web server) has no depth
        "--limit", str(config["host"]),
    ]  # fmt: skip
    for inventory in inventories(config):
        argv += ["--inventory", inventory]
    if config.get("vault_password_file"):
        argv += ["--vault-password-file", str(config["vault_password_file"])]
    return [*argv, str(config["playbook"])]


def pull_env(environ: Mapping[str, str], config: Mapping[str, Any], recap: Path) -> dict[str, str]:
    """ansible-pull's environment: ours without the report's secrets; the checkout's compat
    package importable (the plan filters), the recap file named."""
    env = {k: v for k, v in environ.items() if k not in SECRET_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(config["checkout"]), environ.get("PYTHONPATH", "")) if p
    )
    env["GPUPROV_RECAP_FILE"] = str(recap)
    env["GPUPROV_PULL_RUN"] = "1"  # site.yml's hold plays are for controller runs
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    return env


def verdict(rc: int, recap: Mapping[str, Any] | None) -> str:
    """converged: ansible-pull exited 0 and the host's recap has no failure and no unreachable."""
    if rc != 0 or not recap:
        return "failed"
    return "converged" if not recap.get("failures") and not recap.get("unreachable") else "failed"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def checkout_commit(checkout: Path) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(
    config: Mapping[str, Any], rc: int, started: float, finished: float, recap: Any
) -> dict[str, Any]:
    host = str(config["host"])
    checkout = Path(config["checkout"])
    mine = recap.get(host) if isinstance(recap, dict) else None
    return {
        "host": host,
        "started": iso(started),
        "finished": iso(finished),
        "seconds": round(finished - started, 1),
        "rc": rc,
        "verdict": verdict(rc, mine),
        "recap": mine,
        "repo_url": config["repo_url"],
        "version": config["version"],
        "commit": checkout_commit(checkout),
        "playbook": config["playbook"],
        "plan": read_json(plan_path(config)),
    }


def split_s3_url(url: str) -> tuple[str, str]:
    """s3://bucket/prefix -> (bucket, prefix without slashes at either end)."""
    if not url.startswith("s3://") or not url[5:].split("/", 1)[0]:
        raise ValueError(f"{url!r} is no s3://bucket[/prefix] URL (gpuprov_pull_report_url)")
    bucket, _, prefix = url[5:].partition("/")
    return bucket, prefix.strip("/")


def report_keys(prefix: str, report: Mapping[str, Any]) -> list[str]:
    """Where a run's report goes: the host's latest.json and one object per run."""
    base = f"{prefix}/{report['host']}" if prefix else str(report["host"])
    return [f"{base}/latest.json", f"{base}/{report['finished']}.json"]


def upload(report: Mapping[str, Any], target: Mapping[str, Any]) -> None:
    import boto3  # in the pull venv (roles/gpuprov_pull installs it when a report URL is set)

    bucket, prefix = split_s3_url(str(target["url"]))
    client = boto3.client(
        "s3",
        endpoint_url=target.get("endpoint_url") or None,
        region_name=target.get("region") or None,
    )
    body = (json.dumps(report, indent=1, sort_keys=True) + "\n").encode()
    for key in report_keys(prefix, report):
        client.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json")


def state_dir_of(config: Mapping[str, Any]) -> Path:
    return Path(config.get("state_dir") or "/var/lib/gpuprov/pull")


def hold_path(config: Mapping[str, Any]) -> Path:
    return state_dir_of(config) / HOLD_FILE


def hold(
    config: Mapping[str, Any], controller: str, run_token: str, seconds: int, now: float
) -> int:
    """--hold: hold pull runs off for a controller run (exit 0), or refuse while one runs."""
    path = hold_path(config)
    doc = {
        "controller": controller,
        "run": run_token,
        "since": iso(now),
        "until": iso(now + seconds),
        "ends": now + seconds,
    }
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(f"{HOLD_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    # After the file is there: a pull run that takes the lock from now on sees it.
    with locked(Path(config["lock"])) as free:
        if free:
            print(f"gpuprov-pull: pull runs on {config['host']} held off until {doc['until']}")
            return 0
    path.unlink(missing_ok=True)
    print(
        f"gpuprov-pull: a pull run is converging {config['host']} (it holds {config['lock']}):"
        " run again when it has finished (journalctl -u gpuprov-pull shows it), or stop"
        " gpuprov-pull.timer and wait for it before controller runs",
        file=sys.stderr,
    )
    return HOLD_REFUSED


def release(config: Mapping[str, Any], run_token: str, now: float) -> int:
    """--release: this controller run is over; pull runs go on (its own hold only)."""
    path = hold_path(config)
    doc = read_json(path)
    if not isinstance(doc, dict):
        print(f"gpuprov-pull: no hold at {path}: pull runs went on")
        return 0
    if doc.get("run") != run_token:
        print(f"gpuprov-pull: {path} is another run's ({doc.get('controller')}); it stays")
        return 0
    path.unlink(missing_ok=True)
    late = isinstance(doc.get("ends"), (int, float)) and doc["ends"] <= now
    print(
        f"gpuprov-pull: pull runs on {config['host']} go on"
        + (f" (the hold had expired at {doc.get('until')})" if late else "")
    )
    return 0


def held_off(config: Mapping[str, Any], now: float) -> dict[str, Any] | None:
    """The controller run's hold in force, if any. An expired or unreadable hold file is
    removed (a controller run cut short, or a file half written): pulls go on."""
    path = hold_path(config)
    if not path.exists():
        return None
    doc = read_json(path)
    if isinstance(doc, dict) and isinstance(doc.get("ends"), (int, float)) and doc["ends"] > now:
        return doc
    print(f"gpuprov-pull: {path} is expired or unreadable; removed", flush=True)
    path.unlink(missing_ok=True)
    return None


def run(config: Mapping[str, Any], environ: Mapping[str, str]) -> int:
    state_dir = state_dir_of(config)
    with locked(Path(config["lock"])) as held:
        if not held:
            print(f"gpuprov-pull: another run holds {config['lock']}; this one stops", flush=True)
            return 0
        push = held_off(config, time.time())
        if push is not None:
            print(
                f"gpuprov-pull: a controller run ({push.get('controller')}, since"
                f" {push.get('since')}) is converging this host; pull runs wait until it ends"
                f" or {push.get('until')}; this one stops. If that run has ended without"
                " releasing them (cut short, or failed on this host): run site.yml again, or"
                f" remove {hold_path(config)}",
                flush=True,
            )
            return 0
        with tempfile.TemporaryDirectory(prefix="gpuprov-pull-") as tmp:
            recap_path = Path(tmp) / "recap.json"
            started = time.time()
            argv = pull_argv(config)
            print(f"gpuprov-pull: {' '.join(argv)}", flush=True)
            # The plan this run writes, not the last one (--clean keeps git-ignored files).
            plan_path(config).unlink(missing_ok=True)
            env = pull_env(environ, config, recap_path)
            rc = subprocess.run(argv, env=env, cwd="/", check=False).returncode
            finished = time.time()
            report = build_report(config, rc, started, finished, read_json(recap_path))
        state_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        (state_dir / "last-run.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        print(f"gpuprov-pull: {report['verdict']} (rc={report['rc']}, recap {report['recap']})")
        target = config.get("report")
        if target and target.get("url"):
            try:
                upload(report, target)
            except Exception as exc:  # boto3's errors have no common base worth naming
                print(
                    f"gpuprov-pull: the report could not be uploaded to {target['url']}"
                    f" ({target.get('endpoint_url') or 'AWS'}): {exc} (gpuprov_pull_report_url,"
                    " gpuprov_pull_report_endpoint_url and the report keys)",
                    file=sys.stderr,
                )
                return rc or 1
            print(f"gpuprov-pull: report at {target['url']}/{report['host']}/latest.json")
        return rc or (0 if report["verdict"] == "converged" else 1)


USAGE = "usage: gpuprov_pull_run.py [--hold CONTROLLER RUN SECONDS | --release RUN] CONFIG.json"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    mode, options = None, args[:-1]
    if args[:1] == ["--hold"] and len(args) == 5 and args[3].isdigit() and int(args[3]) > 0:
        mode = "hold"
    elif args[:1] == ["--release"] and len(args) == 3:
        mode = "release"
    elif len(args) == 1:
        mode = "run"
    if mode is None or args[-1].startswith("--"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        config = load_config(Path(args[-1]))
    except ConfigError as exc:
        print(f"gpuprov-pull: {exc}", file=sys.stderr)
        return 2
    if mode == "hold":
        return hold(config, options[1], options[2], int(options[3]), time.time())
    if mode == "release":
        return release(config, options[1], time.time())
    return run(config, os.environ)


if __name__ == "__main__":
    sys.exit(main())
