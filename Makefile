# gpuprov's front door: thin wrappers, no logic. Every target also runs unchanged in CI.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INV ?= inventories/lab/hosts.yml
LAB ?= gpuprov
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The lab's throwaway vault password (scripts/lab/s3lab.py), once `lab-up` made it
# (expanded when the recipe runs).
LAB_VAULT = $(shell test -f .lab/$(LAB)/vault-password && echo --vault-password-file .lab/$(LAB)/vault-password)

.PHONY: help venv deps lint unit test test-lab lab lab-up lab-down lab-status site report check \
        syntax \
        bench bench-site readme-table

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/.stamp: requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt -e .
	touch $@

venv: $(BIN)/.stamp  ## create the virtualenv with pinned tooling and the compat package

deps: venv  ## install the Ansible collections in requirements.yml (bundled by `ansible`)
	$(BIN)/ansible-galaxy collection install -r requirements.yml

lint: deps  ## yamllint, ansible-lint (production), ruff, mypy --strict, shellcheck
	$(BIN)/yamllint --strict -c .yamllint .
	$(BIN)/ansible-lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy plugins/action
	cd scripts/smoke && ../../$(BIN)/mypy --config-file ../../pyproject.toml .
	shellcheck .ci/run scripts/*.sh scripts/lab/*.sh
	$(BIN)/python scripts/secret_scan.py

syntax: deps  ## --syntax-check every playbook against the example inventory
	for p in playbooks/*.yml; do \
	  $(BIN)/ansible-playbook --syntax-check -i inventories/example/hosts.yml $$p || exit 1; done

unit: venv  ## fast tests (no Docker), with branch coverage of the compat package
	$(BIN)/pytest tests/unit tests/lab -m "not lab" --cov=compat --cov-report=term-missing

test-lab: deps  ## lab tests: real hosts in Docker, real apt/dockerd/pip/torchrun (slow)
	$(BIN)/pytest tests/lab -m lab -p no:randomly

test: lint syntax unit test-lab  ## everything CI runs (the README's test command)

lab-up: deps  ## bring the built-in lab up (Debian 12/13 hosts with simulated GPUs)
	$(BIN)/python scripts/lab.py --lab $(LAB) up

site: deps  ## provision the lab (or INV=...) with playbooks/site.yml
	$(BIN)/ansible-playbook -i $(INV) $(LAB_VAULT) playbooks/site.yml

report: venv  ## print the fleet report from reports/
	$(BIN)/python scripts/report.py --reports reports

lab: lab-up site report  ## the main job: lab up + site.yml + fleet report

lab-down: venv  ## tear the lab down
	$(BIN)/python scripts/lab.py --lab $(LAB) down

lab-status: venv  ## table of the lab's hosts
	$(BIN)/python scripts/lab.py --lab $(LAB) status

check: deps  ## --check --diff against INV
	$(BIN)/ansible-playbook -i $(INV) $(LAB_VAULT) playbooks/site.yml --check --diff

bench: venv  ## speed ratios (CLI start-up vs bare Python)
	$(BIN)/python -m compileall -q compat
	$(BIN)/python scripts/bench_cli.py

bench-site: deps  ## site.yml speed ratios on a lab of its own (vs a shell script; 4 hosts vs 1)
	$(BIN)/python scripts/bench_site.py

readme-table: venv  ## regenerate the README support table from compat/data
	$(BIN)/python scripts/readme_table.py README.md
