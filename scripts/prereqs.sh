#!/usr/bin/env bash
# gpuprov's prerequisites, for `make lab` and `make test` (and so for .ci/run).
#
#   scripts/prereqs.sh venv   python3 with venv, an ssh client        (make venv)
#   scripts/prereqs.sh lab    + Docker engine, debootstrap, dpkg-dev, gnupg (make lab)
#   scripts/prereqs.sh test   + shellcheck, chromium (the fleet page's browser test), ip and
#                             nsenter (the fault suite)                              (make test)
#
# On Debian as root it installs what is missing with apt-get (and says what), then, for
# `lab` and `test`, starts dockerd when no engine answers (log: .lab/dockerd.log; waits at
# most GPUPROV_DOCKERD_WAIT seconds, default 60). Elsewhere (not root, not Debian) it
# changes nothing and stops with one line naming every missing package.
# Exit codes: 0 ready, 1 something is missing or dockerd did not start, 2 usage error.
set -euo pipefail

what="${1:-}"
case "$what" in
  venv | lab | test) ;;
  *)
    echo "prereqs.sh: usage: prereqs.sh venv|lab|test" >&2
    exit 2
    ;;
esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
started=$SECONDS
say() { printf '[%4ds] prereqs: %s\n' "$((SECONDS - started))" "$*"; }

# command:package pairs; a package is wanted when its command is missing.
checks=(python3:python3 ssh:openssh-client ssh-keygen:openssh-client)
if [[ $what != venv ]]; then
  checks+=(docker:docker.io dockerd:docker.io debootstrap:debootstrap
    dpkg-scanpackages:dpkg-dev gpg:gnupg tar:tar)
fi
# test: the linters' shellcheck, the fleet page's browser, and what the fault suite uses to
# cut a lab host's route to the mirror (ip, run in the host's network namespace by nsenter).
[[ $what == test ]] && checks+=(shellcheck:shellcheck chromium:chromium ip:iproute2 nsenter:util-linux)

missing=()
add() { [[ " ${missing[*]} " == *" $1 "* ]] || missing+=("$1"); }
for pair in "${checks[@]}"; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || add "${pair#*:}"
done
# Debian's python3 has no venv/ensurepip until python3-venv is installed.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  add python3-venv
elif ! command -v python3 >/dev/null 2>&1; then
  add python3-venv
fi

if ((${#missing[@]})); then
  debian=no
  [[ -r /etc/debian_version ]] && command -v apt-get >/dev/null 2>&1 && debian=yes
  if [[ $(id -u) != 0 || $debian != yes ]]; then
    why="not root"
    [[ $debian != yes ]] && why="not Debian"
    echo "prereqs.sh: missing ${missing[*]} ($why, so not installed): as root on Debian," \
      "run: apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  log="$repo/.lab/apt-install.log"
  mkdir -p "$repo/.lab"
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$log" 2>&1; then
    echo "prereqs.sh: apt-get install ${missing[*]} failed (log $log):" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  say "installed ${missing[*]}"
fi

[[ $what == venv ]] && exit 0

# A Docker engine that answers; start dockerd once when none does.
if ! docker info >/dev/null 2>&1; then
  if [[ $(id -u) != 0 ]]; then
    echo "prereqs.sh: no Docker engine answers and this is not root: start dockerd" \
      "(as root: dockerd &) or join the docker group" >&2
    exit 1
  fi
  log="$repo/.lab/dockerd.log"
  mkdir -p "$repo/.lab"
  wait_s="${GPUPROV_DOCKERD_WAIT:-60}"
  if pidof dockerd >/dev/null 2>&1; then
    say "dockerd runs but does not answer yet; waiting up to ${wait_s}s"
  elif [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
    say "starting docker.service (waiting up to ${wait_s}s)"
    systemctl start docker.service
  else
    say "starting dockerd (log $log, waiting up to ${wait_s}s)"
    setsid dockerd >"$log" 2>&1 </dev/null &
  fi
  deadline=$((SECONDS + wait_s))
  until docker info >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      echo "prereqs.sh: dockerd did not answer within ${wait_s}s; last lines of $log:" >&2
      tail -15 "$log" >&2
      exit 1
    fi
    sleep 1
  done
  say "dockerd answers"
fi
