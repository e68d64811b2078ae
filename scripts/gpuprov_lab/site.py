"""site.yml on the lab, with one progress line per step."""

from __future__ import annotations

import dataclasses
import fcntl
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuprov_lab.common import STATE_ROOT, LabError, lab_tool_env
from gpuprov_lab.s3lab import VAULT_PASSWORD_NAME

SLOW_TASK_S = 20.0  # a task that ran longer gets a progress line of its own


@dataclasses.dataclass
class SiteProgress:
    """Turns ansible-playbook's output into progress lines (pure; fed line by line).

    A line per play, a line per task that took SLOW_TASK_S or more, the failures
    (`fatal:` and what follows, at most 20 lines each) and the recap.
    """

    now: Callable[[], float] = time.monotonic
    task: str | None = None
    task_started: float = 0.0
    in_failure: int = 0
    in_recap: bool = False

    def feed(self, line: str) -> list[str]:
        line = line.rstrip("\n")
        out: list[str] = []
        heading = re.match(r"^(PLAY|TASK|RUNNING HANDLER) \[(.*?)\]", line)
        if heading or line.startswith("PLAY RECAP"):
            out += self._end_task()
            self.in_failure = 0
        if heading and heading.group(1) == "PLAY":
            out.append(f"play: {heading.group(2)}")
        elif heading:
            self.task, self.task_started = heading.group(2), self.now()
        elif line.startswith("PLAY RECAP"):
            self.in_recap = True
            out.append("recap:")
        elif self.in_recap and not line.strip():
            self.in_recap = False  # the host lines end; a task timing table may follow
        elif self.in_recap:
            out.append("  " + re.sub(r"\s+", " ", line.strip()))
        elif line.startswith(("fatal:", "failed:")) or line.startswith("ERROR!"):
            self.in_failure = 20
            out.append(f"  {self.task or ''}: {line.strip()}" if self.task else line.strip())
        elif self.in_failure and line.strip():
            self.in_failure -= 1
            out.append("    " + line.strip())
        return out

    def _end_task(self) -> list[str]:
        if self.task is None:
            return []
        took = self.now() - self.task_started
        task, self.task = self.task, None
        return [f"  {task} ({took:.0f}s)"] if took >= SLOW_TASK_S else []

    def close(self) -> list[str]:
        return self._end_task()


def ansible_tool(name: str) -> str:
    """An Ansible program from this Python's venv, else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise LabError(f"{name} not found: run `make venv deps` (or put the venv's bin/ on PATH)")
    return found


def fact_cache(lab: str) -> Path:
    """The lab's own Ansible fact cache: labs reuse host names (lab-k40m, ...)."""
    return STATE_ROOT / lab / "facts"


def vault_password_file(lab: str) -> Path:
    """The lab's throwaway vault password (gpuprov_lab/s3lab.py writes it at `up`)."""
    return STATE_ROOT / lab / VAULT_PASSWORD_NAME


def ansible_env(lab: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every Ansible run against a lab needs: the repository's ansible.cfg,
    the lab's own fact cache, and the lab's vault password (the S3 keys and the notebook
    token in group_vars/all/vault) when the lab has one.

    `base` (default: this process's environment) is kept except the operator's own Ansible
    configuration, vault and inventory settings (common.OPERATOR_ANSIBLE_ENV), which the
    lab's replace; a fact cache that `base` names wins (the kernel tier keeps its own).
    """
    env = lab_tool_env(base)
    env.setdefault("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(fact_cache(lab)))
    password = vault_password_file(lab)
    if password.is_file():
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(password)
    return env


def log_run(
    runs: Path,
    argv: Sequence[str],
    rc: int | None,
    seconds: float,
    out: str | bytes | None,
    err: str | bytes | None,
    label: str = "",
) -> Path:
    """Keep one Ansible run's whole output in `runs`/NNN.log (numbered in order) and a line
    for it in `runs`/index.txt, so a failed run can be read after the fact and where the time
    went is on disk. rc None: the run was cut off (timeout). Returns the log's path."""
    runs.mkdir(parents=True, exist_ok=True)
    text = [o.decode(errors="replace") if isinstance(o, bytes) else o or "" for o in (out, err)]
    # Runs from two threads (a test and one it started) or two processes (the fault suite's
    # two streams, tests/lab/fault_streams.py) take distinct numbers: flock excludes every
    # other open of the lock file, in this process too.
    with (runs / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        number = len(list(runs.glob("*.log"))) + 1
        log = runs / f"{number:03d}.log"
        log.write_text(
            f"# {' '.join(argv)}\n# {label}\n# rc={rc} {seconds:.0f}s\n{text[0]}\n{text[1]}",
            encoding="utf-8",
        )
        with (runs / "index.txt").open("a", encoding="utf-8") as index:
            index.write(f"{number:03d} rc={rc} {seconds:6.0f}s {label} :: {' '.join(argv[3:])}\n")
    return log
