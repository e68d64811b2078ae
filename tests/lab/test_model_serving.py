"""Export checks and model serving in the lab, for real (marked `lab`; needs a Docker engine).

Runs after test_site.py in the same session (conftest.py orders it first), on the hosts that
site.yml converged: every bookworm host has torch 2.13.0+cpu and passes the export checks; the
hosts whose model_serving_stacks the lab's inventory fills (lab-k40m) serve the L6 model with
Flask behind gunicorn, TorchServe 0.12.0 (Java from Debian) and Triton (the tritonserver that
the nvidia-pytriton wheel bundles, on the CPU: nvcr.io is unreachable here); the other torch
hosts serve nothing. Alone, the module converges the lab with site.yml first.

Nothing is simulated here but the lab's PCI devices: the exports, pip installs, the servers,
the HTTP/gRPC requests and tritonclient are real. The opset-mismatch test installs a real old
onnxruntime (1.16.3, opsets up to 19 by compat/data/onnx.yaml), with the NumPy 1 stack it needs
(OLD_ORT_PINS), beside the host's torch.

Run: GPUPROV_LAB_NAME=h9 GPUPROV_LAB_KEEP=1 pytest -m lab -p no:randomly \
    tests/lab/test_model_serving.py
"""

from __future__ import annotations

import errno
import json
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import shared_runs
from async_jobs import pip_jobs
from conftest import role_ports
from playbook_output import CONVERGED, outcomes, recap

from compat import cli

REPO = Path(__file__).resolve().parents[2]
SMOKE = "/opt/gpuprov/smoke"
PY = "/opt/gpuprov/venv/bin/python"
SERVING = "/opt/gpuprov/serving"
OLD_ORT = "/opt/gpuprov-test/ort-1.16.3-numpy1"
# onnxruntime 1.16.3 is built for NumPy 1.x, and so must be everything the L6 process imports
# that touches NumPy's C API: onnx 1.16.2 (the venv's onnx needs NumPy 2: "module was compiled
# against NumPy C-API version 0x12") and ml-dtypes 0.5.1 (0.4 lacks the float6 types onnxsim
# uses; 0.7 needs NumPy 2). An old serving stack as a whole, beside the host's torch.
OLD_ORT_PINS = "onnxruntime==1.16.3 numpy==1.26.4 onnx==1.16.2 ml-dtypes==0.5.1"
Lab = Any


def timed(capsys: pytest.CaptureFixture[str], what: str, start: float) -> None:
    with capsys.disabled():
        print(f"\n[serving] {what}: {time.monotonic() - start:.1f}s")


@pytest.fixture(scope="module")
def torch_hosts(lab: Lab) -> list[str]:
    hosts = sorted(h for h, hv in lab.hosts.items() if hv.get("lab_release") == "bookworm")
    if not hosts:
        pytest.skip("no bookworm host in this lab (torch needs Python 3.11)")
    return hosts


@pytest.fixture(scope="module")
def serving_hosts(lab: Lab, torch_hosts: list[str]) -> list[str]:
    """The torch hosts whose model_serving_stacks (rendered from the lab's inventory,
    conftest.RENDERED) name a stack."""
    hosts = [h for h in torch_hosts if lab.hosts[h].get("model_serving_stacks")]
    if not hosts:
        pytest.skip("no host of this lab serves (model_serving_stacks empty everywhere)")
    return hosts


@pytest.fixture(scope="module")
def served(
    lab: Lab, serving_hosts: list[str], site_runs: dict[str, shared_runs.Run]
) -> dict[str, dict[str, Any]]:
    """The serving reports of the serving hosts; converges the lab first when run alone (and
    forgets the session's kept runs, from before this converge)."""
    probe = " && ".join(
        f"systemctl is-active --quiet gpuprov-serve-{s}" for s in ("flask", "torchserve", "triton")
    )
    if any(lab.ssh(h, probe, check=False).returncode != 0 for h in serving_hosts):
        site_runs.clear()
        run = lab.ansible_playbook(REPO / "playbooks" / "site.yml")
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    reports = {}
    for host in serving_hosts:
        path = lab.reports / "serving" / f"{host}.json"
        assert path.exists(), f"{path}: site.yml wrote no serving report"
        reports[host] = json.loads(path.read_text(encoding="utf-8"))
    return reports


def l6(lab: Lab, host: str, env: str = "") -> dict[str, Any]:
    cmd = f"{env} {PY} {SMOKE}/l6_export.py --allow-cpu --onnx-opsets {SMOKE}/onnx_opsets.json"
    out = lab.ssh(host, cmd, check=False)
    assert out.stdout.startswith("{"), out.stdout[-2000:] + out.stderr[-2000:]
    verdict: dict[str, Any] = json.loads(out.stdout)
    assert out.returncode == (1 if verdict["status"] == "fail" else 0)
    return verdict


def test_export_checks_pass_on_every_torch_host(
    lab: Lab, torch_hosts: list[str], served: Any
) -> None:
    for host in torch_hosts:
        v = l6(lab, host)
        assert v["status"] == "pass (cpu)", (host, v["reason"])
        checks = v["details"]["checks"]
        for name in ("torchscript_trace", "torchscript_script", "onnx", "onnxsim", "onnxruntime"):
            assert checks[name]["status"] == "pass", (host, name, checks[name])
        assert (
            checks["onnx"]["opset"] == 20
        )  # torch 2.13's TorchScript exporter default (its wheel)
        assert checks["onnxruntime"]["onnxruntime"] == "1.32.0"
        assert checks["onnxruntime"]["providers"] == ["CPUExecutionProvider"]
        assert checks["tensorrt"] == {
            "status": "skipped",
            "reason": "no CUDA device for torch on this host: TensorRT needs a GPU",
        }
        # The same verdict reached the fleet report through gpu_smoke (required in the lab).
        smoke = json.loads((lab.reports / "smoke" / f"{host}.json").read_text())
        assert [x["status"] for x in smoke["layers"] if x["layer"] == "L6"] == ["pass (cpu)"]


def test_an_opset_the_installed_onnxruntime_lacks_fails_naming_both_versions(
    lab: Lab, torch_hosts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    host = torch_hosts[0]
    start = time.monotonic()
    install = (
        f"test -e {OLD_ORT}/onnxruntime/__init__.py || {PY} -m pip install --quiet "
        f"--target {OLD_ORT} {OLD_ORT_PINS}"
    )
    got = lab.ssh(host, install, check=False, timeout=900)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    v = l6(lab, host, env=f"PYTHONPATH={OLD_ORT}")
    timed(capsys, "old onnxruntime + L6", start)
    assert v["status"] == "fail"
    assert v["details"]["checks"]["onnxruntime"]["onnxruntime"] == "1.16.3"
    assert (
        "onnxruntime: ONNX opset 20 (exported by torch 2.13.0+cpu) is not supported by "
        "onnxruntime 1.16.3, which runs opsets 7-19"
    ) in v["reason"]
    # The CLI answers the same question from the same data.
    assert cli.main(["serving", "onnx", "--torch", "2.13.0+cpu", "--onnxruntime", "1.16.3"]) == 1
    # Exported at an opset the old runtime runs, the same model passes.
    ok = lab.ssh(
        host,
        f"PYTHONPATH={OLD_ORT} {PY} {SMOKE}/l6_export.py --allow-cpu --opset 17 "
        f"--onnx-opsets {SMOKE}/onnx_opsets.json",
        check=False,
    )
    assert json.loads(ok.stdout)["status"] == "pass (cpu)", ok.stdout[-2000:]


def test_every_stack_answers_a_real_inference(
    lab: Lab, serving_hosts: list[str], served: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for host in serving_hosts:
        report = served[host]
        with capsys.disabled():  # the median round trips, for the README: printed, never asserted
            for e in report["endpoints"]:
                print(f"\n[serving] {host} {e['stack']}: median {e['latency']['median_ms']} ms")
        assert report["ok"] is True, report
        assert sorted(e["stack"] for e in report["endpoints"]) == ["flask", "torchserve", "triton"]
        for e in report["endpoints"]:
            assert e["health"] == "ready", (host, e)
            assert e["inference"]["ok"] is True, (host, e)
            assert e["latency"]["requests"] == 20
        ts = next(e for e in report["endpoints"] if e["stack"] == "torchserve")
        assert ts["registered"] is True
        assert ts["auth"] == "token"
        sample = json.loads(lab.ssh(host, f"cat {SERVING}/model/sample.json").stdout)
        body = shlex.quote(json.dumps({"inputs": sample["input"]}))
        # Requests of the test's own, not the role's probe: Flask, TorchServe (with its key) and
        # Triton through tritonclient.
        flask = lab.ssh(
            host,
            f"curl -sf -H 'Content-Type: application/json' -d {body} http://127.0.0.1:5000/predict",
        )
        key = json.loads(lab.ssh(host, f"cat {SERVING}/torchserve/key_file.json").stdout)[
            "inference"
        ]["key"]
        torchserve = lab.ssh(
            host,
            f"curl -sf -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
            f"-d {body} http://127.0.0.1:8080/predictions/tiny",
        )
        refused = lab.ssh(
            host,
            f"curl -s -o /dev/null -w '%{{http_code}}' -d {body} http://127.0.0.1:8080/predictions/tiny",
        )
        assert refused.stdout in ("400", "401", "403"), refused.stdout
        client = (
            "import json, sys, numpy as np, tritonclient.http as tc; "
            "c = tc.InferenceServerClient(url='127.0.0.1:8000'); "
            "x = np.asarray(json.load(open(sys.argv[1]))['input'], dtype=np.float32); "
            "i = tc.InferInput('x', list(x.shape), 'FP32'); i.set_data_from_numpy(x); "
            "print(json.dumps(c.infer('tiny', [i]).as_numpy('y').tolist()))"
        )
        triton = lab.ssh(
            host,
            f"{SERVING}/triton/venv/bin/python -c {shlex.quote(client)} "
            f"{SERVING}/model/sample.json",
        )
        for name, got in (
            ("flask", json.loads(flask.stdout)["outputs"]),
            ("torchserve", json.loads(torchserve.stdout)["outputs"]),
            ("triton", json.loads(triton.stdout)),
        ):
            for row_got, row_want in zip(got, sample["output"], strict=True):
                for g, w in zip(row_got, row_want, strict=True):
                    assert abs(g - w) <= 1e-4 + 1e-4 * abs(w), (host, name, got, sample["output"])


# On the host: the mtimes of the state records of the plays that follow background.yml in
# site.yml, and when the Triton service last started, as epoch seconds.
BACKGROUND_FACTS = r"""
import json, os, subprocess, time
later = {}
for role in ("jupyterlab", "object_storage", "gpu_smoke", "dist_launch", "gpu_monitoring"):
    record = "/var/lib/gpuprov/state/%s.json" % role
    if os.path.exists(record):
        later[role] = os.stat(record).st_mtime
started = subprocess.run(
    ["systemctl", "show", "-P", "ActiveEnterTimestampMonotonic", "gpuprov-serve-triton"],
    capture_output=True, text=True, check=True).stdout.strip()
service = time.time() - time.monotonic() + int(started) / 1e6  # systemd's is CLOCK_MONOTONIC
print(json.dumps({"later": later, "service": service}))
"""


def test_triton_packages_install_in_the_background_while_later_plays_run(
    lab: Lab, serving_hosts: list[str], served: Any
) -> None:
    """site.yml starts the Triton environment's pip install right after the PyTorch play
    (playbooks/background.yml, roles/model_serving/tasks/background.yml) and the serving play
    waits for it: on each host serving Triton the job ran and succeeded, began before the
    first of the later plays (notebook, storage, smoke, launch, monitoring) had finished its
    work, and ended before the Triton service started."""
    hosts = [h for h in serving_hosts if "triton" in lab.hosts[h]["model_serving_stacks"]]
    if not hosts:
        pytest.skip("no host of this lab serves Triton")
    for host in hosts:
        jobs = pip_jobs(lab, host, f"{SERVING}/triton/venv")  # the venv the job makes
        if not jobs:
            pytest.skip(f"Triton environment older than the background install ({host}; kept lab)")
        job = jobs[-1]
        facts = json.loads(lab.ssh(host, f"python3 -c {shlex.quote(BACKGROUND_FACTS)}").stdout)
        assert job["rc"] == 0, (host, job)
        assert facts["later"], (host, "no later play left a state record", facts)
        first_later = min(facts["later"].values())
        assert job["start"] < first_later, (host, job, facts["later"])
        # 2 s: the service's time is converted from the monotonic clock at the test's time
        assert job["end"] <= facts["service"] + 2, (host, job, facts["service"])


def test_a_torch_host_with_no_stack_serves_nothing(
    lab: Lab, torch_hosts: list[str], serving_hosts: list[str], served: Any
) -> None:
    """model_serving_stacks empty (lab-mixed, lab-cpu): the role ran there (serving.yml's play
    covers every node) and installed, wrote and started nothing: no unit, no serving directory,
    no listener on the stacks' ports."""
    idle = sorted(set(torch_hosts) - set(serving_hosts))
    if not idle:
        pytest.skip("every torch host of this lab serves")
    ports = role_ports("model_serving")
    assert len(ports) == 7, ports
    for host in idle:
        units = lab.ssh(host, "ls /etc/systemd/system | grep gpuprov-serve; true").stdout
        assert units == "", (host, units)
        assert lab.ssh(host, f"test -e {SERVING}", check=False).returncode == 1, host
        refused = dict.fromkeys(ports, errno.ECONNREFUSED)
        assert lab.connect_results(host, ports) == refused, host


def test_triton_tag_needing_a_newer_driver_is_refused_in_preflight(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu_hosts = [
        h for h in lab.groups.get("gpu_k40m", []) if lab.hosts[h]["lab_release"] == "bookworm"
    ]
    if not gpu_hosts:
        pytest.skip("no bookworm K40m host in this lab")
    host = gpu_hosts[0]
    before = lab.ssh(host, "ls /etc/systemd/system/ | grep gpuprov-serve; true").stdout
    start = time.monotonic()
    run = lab.ansible_playbook(
        REPO / "playbooks" / "plan.yml",
        str(REPO / "playbooks" / "serving.yml"),
        "--limit",
        host,
        "-e",
        '{"model_serving_stacks": ["triton"], "model_serving_triton_method": "container", '
        '"model_serving_triton_tag": "24.04"}',
    )
    timed(capsys, "Triton preflight refusal", start)
    out = " ".join(run.stdout.split())
    assert run.returncode != 0, run.stdout[-4000:]
    plan = json.loads((lab.reports / "plan" / f"{host}.json").read_text())
    branch = plan["plan"]["driver"]["branch"]
    assert branch == 470  # the K40m's last branch (compat/data/architectures.yaml: Kepler)
    assert (
        "tritonserver:24.04 (CUDA 12.4.1) needs driver branch >= 545; "
        f"this host's branch is {branch}"
    ) in out, run.stdout[-4000:]
    assert "tritonserver:24.04 needs compute capability >= 6.0; this host has a 3.5 GPU" in out
    assert recap(run.stdout)[host]["changed"] == 0
    assert lab.ssh(host, "ls /etc/systemd/system/ | grep gpuprov-serve; true").stdout == before


def test_check_mode_on_the_converged_hosts_changes_nothing(
    lab: Lab,
    torch_hosts: list[str],
    served: Any,
    capsys: pytest.CaptureFixture[str],
    site_runs: dict[str, shared_runs.Run],
) -> None:
    """In the session: test_site.py's --check --diff of the converged lab (shared_runs.py),
    which ran plan.yml and serving.yml under check mode on every host."""
    kept = site_runs.get(shared_runs.CHECK)
    if kept is not None:
        assert kept.ran(REPO / "playbooks" / "serving.yml") >= set(torch_hosts), kept.plays
        for host in torch_hosts:
            assert kept.recap[host] == CONVERGED, host
        return
    start = time.monotonic()
    run = lab.ansible_playbook(
        REPO / "playbooks" / "plan.yml",
        str(REPO / "playbooks" / "serving.yml"),
        "--check",
        "--diff",
    )
    timed(capsys, "serving.yml --check", start)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    for host in torch_hosts:
        assert outcomes(recap(run.stdout))[host] == CONVERGED, run.stdout[-6000:]
