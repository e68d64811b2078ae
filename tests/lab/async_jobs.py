"""The async (`poll: 0`) jobs a run left on a lab host, read one way for every lab module.

site.yml starts long pip installs as Ansible async jobs (playbooks/background_pytorch.yml,
playbooks/background.yml); Ansible leaves each job's result in root's ~/.ansible_async/.
`pip_jobs` reads the jobs whose command names a given environment (each job makes its venv,
then runs its pip: plugins/filter/gpuprov_venv.py), with their rc and their start and end as
epoch seconds, oldest first.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

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


def pip_jobs(lab: Lab, host: str, venv: str) -> list[dict[str, float]]:
    """The finished async jobs on ``host`` whose argv holds ``venv`` (the environment the job
    makes and installs into), oldest first."""
    out = lab.ssh(host, f"python3 -c {shlex.quote(PIP_JOBS)} {shlex.quote(venv)}").stdout
    jobs: list[dict[str, float]] = json.loads(out)
    return jobs
