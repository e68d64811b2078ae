"""The async (`poll: 0`) jobs a run left on a lab host, read one way for every lab module.

site.yml starts long pip installs as Ansible async jobs (playbooks/background_pytorch.yml,
playbooks/background.yml); Ansible leaves each job's result in root's ~/.ansible_async/.
`pip_jobs` reads the jobs whose command names a given environment (each job makes its venv,
then runs its pip: plugins/filter/gpuprov_venv.py), with their rc and their start and end as
epoch seconds, oldest first. `jupyterlab_results` reads, from a run's json callback document,
what the jupyterlab role's download job (roles/jupyterlab/tasks/background-start.yml) and the
install phase's tasks that use it did; `check_jupyterlab_download` checks them for a job that
ended with a given exit status.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

# Runs on the host with the environment's path as its argument.
PIP_JOBS = r"""
import glob, json, os, sys
from datetime import datetime
jobs = []
for path in glob.glob(os.path.expanduser("~/.ansible_async/*")):
    with open(path) as f:
        try:
            job = json.load(f)
        except ValueError:
            continue
    if sys.argv[1] in (job.get("cmd") or []) and job.get("start") and job.get("end"):
        epoch = lambda t: datetime.fromisoformat(t).timestamp()  # str(datetime): no .%f at 0 us
        jobs.append({"rc": job["rc"], "start": epoch(job["start"]), "end": epoch(job["end"])})
print(json.dumps(sorted(jobs, key=lambda j: j["start"])))
"""

Lab = Any  # tests/lab/conftest.py's Lab (the `lab` fixture)

JUPYTER_JOB = "jupyterlab : background-start | Start the download of JupyterLab's packages (async)"
JUPYTER_WAIT = "jupyterlab : install-venv | Wait for this run's download of the packages"
JUPYTER_READ = "jupyterlab : install-venv | Read how this run's download ended"
JUPYTER_LOCAL = (
    "jupyterlab : install-venv | Install JupyterLab and ipykernel from this run's download"
    " (no index)"
)
JUPYTER_INDEX = (
    "jupyterlab : install-venv | Install JupyterLab and ipykernel into the PyTorch environment"
)
JUPYTER_REMOVE = "jupyterlab : install-venv | Remove this run's download"
# Where the download goes, read from the role (its one source).
JUPYTER_VARS = Path(__file__).resolve().parents[2] / "roles/jupyterlab/vars/main.yml"
JUPYTER_DOWNLOAD = str(yaml.safe_load(JUPYTER_VARS.read_text())["_jupyterlab_download_dir"])


def jupyterlab_results(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The results of the jupyterlab download's tasks in a run, by "host / task"."""
    names = (JUPYTER_JOB, JUPYTER_WAIT, JUPYTER_READ, JUPYTER_LOCAL, JUPYTER_INDEX, JUPYTER_REMOVE)
    return {
        f"{host} / {task['task']['name']}": result
        for play in doc["plays"]
        for task in play["tasks"]
        if task["task"]["name"] in names
        for host, result in task["hosts"].items()
    }


def check_jupyterlab_download(results: dict[str, dict[str, Any]], host: str, rc: int) -> None:
    """On ``host``, this run's download job started, the install phase waited for it and read
    that it ended with exit ``rc``; with 0 it installed from the download (not the index) and
    removed it, with any other it installed from the index and left the directory as it was."""
    assert results[f"{host} / {JUPYTER_JOB}"].get("ansible_job_id"), (host, results)
    assert not results[f"{host} / {JUPYTER_WAIT}"].get("skipped"), (host, results)
    ended = results[f"{host} / {JUPYTER_READ}"]
    assert (ended.get("finished"), ended.get("rc")) == (1, rc), (host, ended)
    used, unused = (JUPYTER_LOCAL, JUPYTER_INDEX) if rc == 0 else (JUPYTER_INDEX, JUPYTER_LOCAL)
    assert results[f"{host} / {used}"].get("changed"), (host, used, results)
    assert results[f"{host} / {unused}"].get("skipped"), (host, unused, results)
    removed = results[f"{host} / {JUPYTER_REMOVE}"]
    assert removed.get("changed" if rc == 0 else "skipped"), (host, removed)


def pip_jobs(lab: Lab, host: str, venv: str) -> list[dict[str, float]]:
    """The finished async jobs on ``host`` whose argv holds ``venv`` (the environment the job
    makes and installs into), oldest first."""
    out = lab.ssh(host, f"python3 -c {shlex.quote(PIP_JOBS)} {shlex.quote(venv)}").stdout
    jobs: list[dict[str, float]] = json.loads(out)
    return jobs
