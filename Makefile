# gpuprov's front door: thin wrappers, no logic. Every target also runs unchanged in CI.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LAB ?= gpuprov
# The lab's inventory: inventories/lab/hosts.yml for the default lab, .lab/NAME/hosts.yml else.
INV ?= $(if $(filter gpuprov,$(LAB)),inventories/lab/hosts.yml,.lab/$(LAB)/hosts.yml)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Development and CI machines here set PYTHONDONTWRITEBYTECODE=1: every Python process then
# compiles from source all it imports, and ansible-playbook forks a worker per task and host,
# each importing Jinja's and the plugins' code again (a 1-host no-op of the stack plays: 4.9
# CPU-s against 4.0 with bytecode, 2026-12-05). What make runs writes and reuses it (the
# __pycache__ directories are git-ignored, left out of the collection and of the state digests).
unexport PYTHONDONTWRITEBYTECODE
# The venv's tools first (ansible-lint warns when it has to add its own bin/ to PATH).
export PATH := $(CURDIR)/$(BIN):$(PATH)
# The lab's throwaway vault password (scripts/gpuprov_lab/s3lab.py), once `lab-up` made it
# (expanded when the recipe runs).
LAB_VAULT = $(shell test -f .lab/$(LAB)/vault-password && echo --vault-password-file .lab/$(LAB)/vault-password)

.PHONY: help prereqs prereqs-test venv deps lint unit lint-idle syntax-idle test test-lab test-lab-live lab lab-up lab-site lab-down \
        lab-status lab-images site report check syntax \
        bench bench-site readme-table test-faults test-kernel ee bundle

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

prereqs:  ## install (Debian, root) and start what the lab needs: Docker engine, debootstrap, ...
	scripts/prereqs.sh lab

prereqs-test:  ## the same for `make test`, plus shellcheck, chromium (the fleet page), iproute2 and util-linux (the fault suite)
	scripts/prereqs.sh test

# The editable install of gpuprov itself with Python warnings off: setuptools' build backend
# otherwise prints an informational "BuildBackendWarning: Editable installation" box.
# --no-compile: Python compiles what it imports when it first imports it; compiling all of
# `ansible`'s collections up front made a 13 s install take 33 s.
$(BIN)/.stamp: requirements-dev.txt constraints-dev.txt pyproject.toml
	scripts/prereqs.sh venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip -c constraints-dev.txt
	$(BIN)/pip install --quiet --no-compile -r requirements-dev.txt -c constraints-dev.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet --no-deps -e .
	touch $@

venv: $(BIN)/.stamp  ## create the virtualenv with pinned tooling and the compat package

deps: venv  ## install the Ansible collections in requirements.yml (bundled by `ansible`)
	$(BIN)/ansible-galaxy collection install -r requirements.yml

lint: deps  ## yamllint, ansible-lint (production), ruff check and format, mypy --strict, shellcheck, the secret scan
	$(BIN)/yamllint --strict -c .yamllint .
	$(BIN)/ansible-lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy  # once: compat, scripts (smoke, lab), plugins (pyproject.toml [tool.mypy])
	shellcheck .ci/run scripts/*.sh scripts/lab/*.sh
	$(BIN)/python scripts/secret_scan.py

# The example fleet has no cpu_nodes group: a syntax check needs no host to match.
syntax: deps  ## --syntax-check every playbook against the example inventory
	for p in playbooks/*.yml; do \
	  ANSIBLE_HOST_PATTERN_MISMATCH=ignore \
	  $(BIN)/ansible-playbook --syntax-check -i inventories/example/hosts.yml $$p || exit 1; done

# One measured run on every core (pytest-xdist; subprocesses measured too: pyproject.toml
# [tool.coverage.run] patch), two gates on its data: compat >= 90%, the Python that runs on
# hosts (smoke scripts, roles' files/) >= 80% (the few files and functions out of that gate:
# [tool.coverage.report] omit, exclude_also).
unit: venv  ## fast tests (no Docker); branch coverage gates: compat 90%, the hosts' Python 80%
	$(BIN)/pytest tests/unit tests/lab -m "not lab" -n auto --cov --cov-report=
	$(BIN)/coverage report --include='compat/*' --fail-under=90
	$(BIN)/coverage report --include='scripts/smoke/*.py,roles/*/files/*.py' --fail-under=80

test-lab: deps  ## lab tests: real hosts in Docker, real apt/dockerd/pip/torchrun, the fault suite (slow)
	$(BIN)/pytest tests/lab -m "lab and not kernel" -p no:randomly --durations=30

test-faults: deps  ## only the fault-injection cases (kill, mirror, disk full, ssh drop; in test-lab too)
	$(BIN)/pytest tests/lab -m faults -p no:randomly

# The unit tests (on every core) with lint and syntax beside them at the lowest CPU priority,
# and the build of the lab's images when they are not cached yet (debootstrap: mostly waiting
# on the archive; about 1 s when they are); the lab tests once the unit tests passed, lint and
# syntax going on beside them. At the lowest priority these take the CPU the others leave idle
# (about a fifth of it: docs/benchmarks.md); beside the unit tests they still cost those about
# 20 s (103-108 s in CI against 87 s alone). Lint ends about a minute into the lab tests
# here: its failure fails `make test` when they end (one that ends before the unit tests stops
# it before the lab: make starts no new target after one failed). The unit tests stay out of
# the lab's way: at normal priority beside it they slowed its first run as much as they saved,
# and at the lowest their timeouts would meet the lab's busiest minutes. Each check's output
# comes in one block when it ends (--output-sync); the lab tests' is live.
test: prereqs-test deps  ## everything CI runs (the README's test command)
	$(MAKE) --no-print-directory -j4 --output-sync=target unit lint-idle syntax-idle lab-images test-lab-live

lint-idle syntax-idle: deps
	nice -n 19 $(MAKE) --no-print-directory $(@:-idle=)

test-lab-live: deps unit lab-images
	$(MAKE) --no-print-directory --output-sync=none test-lab

lab-images: venv  ## build the lab's Debian images (for GPUPROV_LAB_HOSTS, default 'default')
	$(BIN)/python scripts/lab.py images --hosts "$${GPUPROV_LAB_HOSTS:-default}"

test-kernel: deps  ## kernel tier: real DKMS nvidia.ko for Debian 12's kernel, booted in QEMU TCG (slow, not in CI)
	command -v qemu-system-x86_64 >/dev/null && command -v mkfs.ext4 >/dev/null || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-system-x86 e2fsprogs
	GPUPROV_KERNEL_TIER=1 $(BIN)/pytest tests/lab/test_kernel.py -m kernel -p no:randomly -s

lab-up: prereqs deps  ## bring the built-in lab up (Debian 12/13 hosts with simulated GPUs)
	$(BIN)/python scripts/lab.py --lab $(LAB) up

lab-site: deps  ## site.yml on the lab: one line per play, full log in .lab/LAB/site.log
	$(BIN)/python scripts/lab.py --lab $(LAB) site

site: deps  ## provision the lab (or INV=...) with playbooks/site.yml
	$(BIN)/ansible-playbook -i $(INV) $(LAB_VAULT) playbooks/site.yml

report: venv  ## print the fleet report of INV's hosts from reports/
	$(BIN)/python scripts/report.py --reports reports --inventory $(INV) --html

# The report also after a failed site.yml (it says which host failed and why); the exit
# status is site.yml's when that failed, else the report's.
lab: prereqs lab-up  ## the main job: prerequisites, lab up, site.yml, fleet report
	rc=0; $(BIN)/python scripts/lab.py --lab $(LAB) site || rc=$$?; \
	$(BIN)/python scripts/report.py --reports reports --inventory $(INV) --html || { r=$$?; [ $$rc -ne 0 ] || rc=$$r; }; \
	exit $$rc

lab-down: venv  ## tear the lab down
	$(BIN)/python scripts/lab.py --lab $(LAB) down

lab-status: venv  ## table of the lab's hosts
	$(BIN)/python scripts/lab.py --lab $(LAB) status

check: deps  ## --check --diff against INV
	$(BIN)/ansible-playbook -i $(INV) $(LAB_VAULT) playbooks/site.yml --check --diff

bench: venv  ## speed ratios (CLI start-up vs bare Python; planning 1k vs 10k hosts)
	$(BIN)/python -m compileall -q compat
	$(BIN)/python scripts/bench_cli.py
	$(BIN)/python scripts/bench_plan.py

# The execution environment's build context (execution-environment.yml): the collection's
# tarball and gpuprov's wheel in $(EE_DIR), then `ansible-builder create` writes the
# Containerfile and context to $(EE_DIR)/context. `ansible-builder build` makes the image
# where quay.io is reachable (not on our machines).
# execution-environment.yml reads its artifacts from here.
EE_DIR := build/ee
# The offline bundle (docs/bundle.md): HOSTS converged online, one per plan; OUT keeps the cache
# and the signing key between builds, OUT/bundle is what to serve.
BUNDLE_OUT ?= bundle-out
bundle: deps  ## offline bundle: INV=... HOSTS=... [FLEET=...] [BUNDLE_OUT=bundle-out] (what HOSTS installed, downloaded once)
	@test -n "$(HOSTS)" || { echo "make bundle: set HOSTS (converged hosts of INV, one per plan)" >&2; exit 2; }
	$(BIN)/python scripts/bundle.py collect -i $(INV) --limit '$(HOSTS)' --fleet '$(FLEET)' --out $(BUNDLE_OUT) -- $(LAB_VAULT)
	$(BIN)/python scripts/bundle.py build --out $(BUNDLE_OUT)

ee: venv  ## the AWX/AAP execution environment's build context (ansible-builder create)
	rm -rf $(EE_DIR) && mkdir -p $(EE_DIR)
	$(BIN)/ansible-galaxy collection build --output-path $(EE_DIR) .
	mv $(EE_DIR)/gpuprov-fleet-*.tar.gz $(EE_DIR)/gpuprov-fleet.tar.gz
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir $(EE_DIR) .
	$(BIN)/ansible-builder create --file execution-environment.yml --context $(EE_DIR)/context

bench-site: deps  ## site.yml speed ratios on a lab of its own (vs a shell script; no-op on 8 and 4 hosts vs 1, and a 5-ping play's)
	$(BIN)/python scripts/bench_site.py

readme-table: venv  ## regenerate the README support table from compat/data
	$(BIN)/python scripts/readme_table.py README.md
