# TalentRL — `make demo` runs the whole pipeline on the embedded default; `make test` runs the tests.
SHELL := /bin/bash
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export DAGSTER_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo cpu-full test test-all ui bench clean clean-all

# Creates .venv from the committed lock when it is missing (idempotent: a stamp records the lock hash).
setup: .venv/.stamp
.venv/.stamp: requirements.lock pyproject.toml
	@test -x $(PY) || python3.11 -m venv .venv || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	@touch $@

demo: setup
	$(PY) -m pipeline.demo

# The longer CPU run of issue 6 (1 h 47 min on 2 cores, measured): same chain, experiment=cpu_full, also recorded in DVC.
cpu-full: setup
	$(PY) -m pipeline.demo experiment=cpu_full

test: setup
	$(PY) -m pytest -q -m "not slow"

test-all: setup
	$(PY) -m pytest -q

ui: setup
	@mkdir -p $(DAGSTER_HOME)
	$(PY) -m pipeline.ui

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Keeps artifacts/wandb: offline runs not yet synced (`wandb sync artifacts/wandb/offline-run-*`) would be lost.
clean:
	@if [ -d artifacts ]; then find artifacts -mindepth 1 -maxdepth 1 ! -name wandb -exec rm -rf {} +; fi
	rm -rf .dagster_home
	@if [ -d artifacts/wandb ]; then echo "kept artifacts/wandb (offline runs); 'make clean-all' removes it too"; fi

clean-all:
	rm -rf artifacts .dagster_home
