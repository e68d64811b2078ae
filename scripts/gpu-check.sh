#!/usr/bin/env bash
# gpu-check.sh: the gpuprov smoke layers on this machine, no Ansible needed.
#
#   scripts/gpu-check.sh [--allow-cpu] [--required L0,L1,L3,PERF,L4,L5] [--out DIR]
#
# Finds a Python with torch (GPU_CHECK_PYTHON, else python3 when it imports torch);
# otherwise creates a venv (DIR/venv, with the system site-packages) and pip-installs
# torch and nvidia-ml-py from whatever pip is configured to use (a local store/mirror on
# air-gapped machines; set GPU_CHECK_TORCH_SPEC to pin, e.g. "torch==2.5.1").
# Then runs scripts/smoke/run_all.py: L0 hardware, L1 driver, L2 container runtime,
# L3 CUDA + framework, PERF floors (compat/data/perf.yaml, when PyYAML is there),
# L4 training + export, and L5 as a one-node torchrun all_reduce (gloo, and nccl on GPUs).
# The JSON report is printed and kept in DIR/gpu-check.json (DIR default: $OUT or
# /tmp/gpu-check). Each layer is bounded (GPU_CHECK_LAYER_TIMEOUT, default 300 s).
#
# Exit: 0 every required layer passed (skipped never counts), 1 not, 2 setup failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
smoke="$here/smoke"
out="${OUT:-/tmp/gpu-check}"
required="L0,L1,L3,PERF,L4,L5"
allow_cpu=()
while [ $# -gt 0 ]; do
  case "$1" in
    --allow-cpu) allow_cpu=(--allow-cpu); shift ;;
    --required) required="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
log() { echo "gpu-check: $*" >&2; }

has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }

py="${GPU_CHECK_PYTHON:-}"
if [ -z "$py" ]; then
  if command -v python3 >/dev/null && has_torch python3; then
    py=$(command -v python3)
  elif [ -x "$out/venv/bin/python" ] && has_torch "$out/venv/bin/python"; then
    py="$out/venv/bin/python"
  else
    log "no torch found: creating $out/venv and installing ${GPU_CHECK_TORCH_SPEC:-torch}"
    python3 -m venv --system-site-packages "$out/venv" || { log "python3 -m venv failed"; exit 2; }
    timeout 900 "$out/venv/bin/pip" install -q "${GPU_CHECK_TORCH_SPEC:-torch}" nvidia-ml-py \
      || { log "pip install torch failed (no index or local store reachable?)"; exit 2; }
    py="$out/venv/bin/python"
  fi
fi
log "python: $py ($("$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1))"
# NVML for L1 when it is missing (best effort; nvidia-smi is the fallback).
"$py" -c 'import pynvml' >/dev/null 2>&1 || timeout 120 "$py" -m pip install -q nvidia-ml-py >/dev/null 2>&1 || true

floors=()
if "$py" -c 'import yaml' >/dev/null 2>&1 || python3 -c 'import yaml' >/dev/null 2>&1; then
  pyy="$py"; "$py" -c 'import yaml' >/dev/null 2>&1 || pyy=python3
  "$pyy" - "$repo/compat/data/perf.yaml" "$out/floors.json" <<'PY'
import json, sys, yaml
data = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
json.dump({"floors": data["floors"]}, open(sys.argv[2], "w", encoding="utf-8"))
PY
  floors=(--floors "$out/floors.json")
else
  log "PyYAML missing: PERF runs without floors (measured figures only)"
fi

rc=0
python3 "$smoke/run_all.py" --layers L0,L1,L2,L3,PERF,L4,L5 --required "$required" \
  --python "$py" --layer-timeout "${GPU_CHECK_LAYER_TIMEOUT:-300}" "${floors[@]}" \
  "${allow_cpu[@]}" --out "$out/gpu-check.json" >/dev/null || rc=$?
if [ ! -s "$out/gpu-check.json" ]; then
  log "run_all.py wrote no report (exit $rc)"; exit 2
fi
cat "$out/gpu-check.json"
python3 - "$out/gpu-check.json" <<'PY' >&2
import json, sys
r = json.load(open(sys.argv[1]))
for v in r["layers"]:
    print(f"{v['layer']:5} {v['status']:11} {v['reason'][:150]}")
print("required:", ",".join(r["required"]), "->", "OK" if r["ok"] else "NOT OK")
PY
exit "$rc"
