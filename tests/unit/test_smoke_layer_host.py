"""scripts/smoke/layer_host.py and run_all.py's use of it: the torch layers run in children
forked from one interpreter (torch imported once), each still isolated as a process of its own.

Real processes throughout: layer_host.py runs as a program; the layers in the first test are
stand-in modules beside a copy of it (a layer that crashes, hangs, exits); the run_all tests
run the real L3, PERF and L4 scripts on a simulated PCI tree with this venv's interpreter,
which has no torch (the layers say so in their verdicts), and compare with one interpreter per
layer, the way run_all ran them before.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pci_tree import K40M, write_pci
from smoke_modules import SMOKE, smoke

run_all = smoke("run_all")
sl = smoke("smokelib")


LAYERS = {
    "ok": """
import json, os
def main(argv):
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": argv}))
    return 0
""",
    "crash": """
import os, sys
def main(argv):
    print("half a line", end="")
    sys.stdout.flush()
    os.abort()
""",
    # Hangs, with a grandchild in its process group: both must be gone after the timeout.
    "hang": """
import subprocess, sys, time
def main(argv):
    child = subprocess.Popen(["sleep", "300"])
    print(child.pid)
    sys.stdout.flush()
    time.sleep(300)
""",
    "raises": """
def main(argv):
    raise RuntimeError("layer bug")
""",
    "exits": """
import sys
def main(argv):
    print("bad flag", file=sys.stderr)
    sys.exit(3)
""",
    "exit_none": """
import sys
def main(argv):
    sys.exit()
""",
    "exit_message": """
import sys
def main(argv):
    sys.exit("cannot go on")
""",
    "uses_torch": """
import json, torch
def main(argv):
    print(json.dumps({"torch": torch.__name__}))
    return 0
""",
}


def host_copy(tmp_path: Path) -> Path:
    """layer_host.py with the stand-in layers beside it (it imports layers from its folder)."""
    shutil.copy(SMOKE / "layer_host.py", tmp_path / "layer_host.py")
    for name, text in LAYERS.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path / "layer_host.py"


def run_host(script: Path, jobs: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(script), "--timeout", str(timeout), json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_layer_is_a_process_of_its_own_and_a_crash_or_hang_takes_only_it_down(
    tmp_path: Path,
) -> None:
    script = host_copy(tmp_path)
    jobs = [
        {"layer": "A", "module": "ok", "argv": ["--x", "1"]},
        {"layer": "B", "module": "crash"},
        {"layer": "C", "module": "hang"},
        {"layer": "D", "module": "raises"},
        {"layer": "E", "module": "exits"},
        {"layer": "F", "module": "ok"},
    ]
    started = time.monotonic()
    got = run_host(script, jobs, timeout=2)
    assert time.monotonic() - started < 60
    assert [r["layer"] for r in got] == list("ABCDEF")
    first, last = json.loads(got[0]["stdout"]), json.loads(got[5]["stdout"])
    assert first["argv"] == ["--x", "1"]
    assert last["argv"] == []
    assert first["pid"] != last["pid"], "two layers shared one process"
    assert first["ppid"] == last["ppid"], "the layers are not children of one layer_host"
    assert (got[0]["rc"], got[0]["timed_out"]) == (0, False)
    assert (got[1]["rc"], got[1]["stdout"]) == (-6, "half a line")  # SIGABRT
    assert got[2]["timed_out"] is True
    grandchild = int(got[2]["stdout"].split()[0])
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild), "the hung layer's own child outlived the timeout"
    assert got[3]["rc"] == 1
    assert "RuntimeError: layer bug" in got[3]["stderr"]
    assert (got[4]["rc"], got[4]["stderr"]) == (3, "bad flag\n")
    assert got[5]["rc"] == 0


def test_bad_jobs_are_refused_with_exit_2(tmp_path: Path) -> None:
    script = host_copy(tmp_path)
    for bad in ("not json", '{"layer": "A"}', '[{"module": "ok"}]'):
        proc = subprocess.run(
            [sys.executable, str(script), bad], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 2, bad
        assert "JOBS:" in proc.stderr


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k != "duration_s"}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def test_run_shared_gives_the_verdicts_one_interpreter_per_layer_gives(tmp_path: Path) -> None:
    root = write_pci(tmp_path / "sys", K40M)
    ns = SimpleNamespace(
        sysfs_root=str(root), floors="", allow_cpu=True, onnx_opsets="", gpu=["Tesla K40m=3.5"]
    )
    jobs = [(layer, run_all.layer_args(layer, ns)) for layer in ("L3", "PERF", "L4")]
    shared = run_all.run_shared(jobs, sys.executable, 120)
    alone = [run_all.run_layer(layer, sys.executable, a, 120) for layer, a in jobs]
    assert [v["layer"] for v in shared] == ["L3", "PERF", "L4"]
    assert without_timings(shared) == without_timings(alone)
    assert {v["status"] for v in shared} <= {sl.FAIL, sl.SKIPPED}  # no torch in this venv


def test_run_shared_turns_a_crashed_layer_host_into_a_fail_for_each_layer(tmp_path: Path) -> None:
    bad_python = tmp_path / "python"
    bad_python.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    bad_python.chmod(0o755)
    got = run_all.run_shared([("L3", []), ("L4", [])], str(bad_python), 30)
    assert [(v["layer"], v["status"], v["reason"]) for v in got] == [
        ("L3", "fail", "layer_host.py crashed (exit 3): boom"),
        ("L4", "fail", "layer_host.py crashed (exit 3): boom"),
    ]
    missing = run_all.run_shared([("L6", [])], str(tmp_path / "nope"), 30)
    assert missing[0]["status"] == "fail"
    assert missing[0]["reason"].startswith("cannot run ")


def test_parse_shared_wants_one_result_per_layer_in_order() -> None:
    one = {"layer": "L3", "rc": 0, "stdout": "{}", "stderr": "", "timed_out": False}
    assert run_all.parse_shared(json.dumps([one]), ["L3"]) == [one]
    assert run_all.parse_shared(json.dumps([one]), ["L3", "L4"]) is None
    assert run_all.parse_shared(json.dumps([one]), ["L4"]) is None
    assert run_all.parse_shared("Traceback ...", ["L3"]) is None
    assert run_all.parse_shared(json.dumps({"L3": one}), ["L3"]) is None


def test_run_all_keeps_the_asked_order_around_the_shared_layers(tmp_path: Path, capsys) -> None:
    root = write_pci(tmp_path / "sys", K40M)
    rc = run_all.main(
        ["--layers", "L3,L0,L4", "--required", "L0", "--sysfs-root", str(root), "--allow-cpu"]
    )
    report = json.loads(capsys.readouterr().out)
    assert [v["layer"] for v in report["layers"]] == ["L3", "L0", "L4"]
    assert report["layers"][1]["status"] == "pass"
    assert rc == 0


def test_the_gpu_smoke_role_installs_every_script_run_all_runs() -> None:
    import yaml

    role_vars = yaml.safe_load((SMOKE.parents[1] / "roles/gpu_smoke/vars/main.yml").read_text())
    needed = {*run_all.SCRIPTS.values(), "layer_host.py", "smokelib.py", "run_all.py"}
    assert needed <= set(role_vars["_gpu_smoke_scripts"])


def test_sys_exit_codes_are_the_interpreters(tmp_path: Path) -> None:
    script = host_copy(tmp_path)
    got = run_host(
        script,
        [{"layer": "A", "module": "exit_none"}, {"layer": "B", "module": "exit_message"}],
        timeout=30,
    )
    assert (got[0]["rc"], got[0]["stderr"]) == (0, "")
    assert (got[1]["rc"], got[1]["stderr"]) == (1, "cannot go on\n")


def test_torch_is_imported_once_for_all_layers(tmp_path: Path) -> None:
    """A stand-in torch package that counts its imports: layer_host imports it before the
    first fork; the layers, each in its own child, find it imported."""
    script = host_copy(tmp_path)
    stub = tmp_path / "stub" / "torch"
    stub.mkdir(parents=True)
    count = tmp_path / "imports.txt"
    (stub / "__init__.py").write_text(
        f"with open({str(count)!r}, 'a') as fh:\n    fh.write('import\\n')\n"
    )
    jobs = [{"layer": x, "module": "uses_torch"} for x in ("L3", "PERF", "L4")]
    proc = subprocess.run(
        [sys.executable, str(script), "--timeout", "30", json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "stub")},
    )
    got = json.loads(proc.stdout)
    assert [json.loads(r["stdout"]) for r in got] == [{"torch": "torch"}] * 3
    assert count.read_text() == "import\n"


def test_a_killed_layer_host_takes_its_running_layer_with_it(tmp_path: Path) -> None:
    """SIGTERM (run_all's timeout, Ctrl-C) kills the running layer's group, grandchild too;
    SIGKILL, which no handler sees, still ends the layer (it dies with its parent)."""
    script = host_copy(tmp_path)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                "--timeout",
                "300",
                json.dumps([{"layer": "C", "module": "hang"}]),
            ],
            stdout=subprocess.DEVNULL,
        )
        layer = grandchild = 0
        deadline = time.monotonic() + 30
        while not (layer and grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
            kids = children(proc.pid)
            layer = kids[0] if kids else 0
            grand = children(layer) if layer else []
            grandchild = grand[0] if grand else 0
        assert layer, "the layer did not start"
        assert grandchild, "the layer's own child did not start"
        proc.send_signal(sig)
        proc.wait(timeout=30)
        gone = [pid for pid in (layer, grandchild) if pid]
        if sig == signal.SIGKILL:
            gone = [layer]  # its own child is left to the layer's group (it has no parent death)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in gone) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in gone), (sig, gone)
        if grandchild and alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_run_shared_turns_a_layer_that_ran_over_into_its_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_all's side of a timeout: the layer's own "ran over" verdict, and the next layer's
    verdict as usual (a stand-in L3 that hangs and a stand-in L4 that passes)."""
    shutil.copy(SMOKE / "layer_host.py", tmp_path / "layer_host.py")
    (tmp_path / "l3_cuda.py").write_text("import time\ndef main(argv):\n    time.sleep(300)\n")
    (tmp_path / "l4_train.py").write_text(
        "import json\ndef main(argv):\n"
        "    print(json.dumps({'layer': 'L4', 'status': 'pass', 'reason': 'ok'}))\n"
        "    return 0\n"
    )
    monkeypatch.setattr(run_all, "HERE", tmp_path)
    got = run_all.run_shared([("L3", ["--x"]), ("L4", [])], sys.executable, 1)
    assert got[0]["status"] == "fail"
    assert got[0]["reason"] == "l3_cuda.py ran over 1s"
    assert got[0]["details"]["command"][-2:] == [str(tmp_path / "l3_cuda.py"), "--x"]
    assert 0.9 < got[0]["duration_s"] < 30
    assert got[1] == {"layer": "L4", "status": "pass", "reason": "ok"}


def test_run_all_refuses_a_layer_listed_twice(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--layers", "L0,L3,L0"])
    assert exc.value.code == 2
    assert "layer(s) listed twice: L0" in capsys.readouterr().err
