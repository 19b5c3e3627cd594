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

.PHONY: setup data demo repro cpu-full webshop alfworld test test-all ui bench clean clean-all

# Training runs preload jemalloc where it is installed (Debian/Ubuntu: `apt install libjemalloc2`): on a real SFT
# 1.24x glibc's tokens a second at half the resident memory, the same weights (docs/performance.md). `JEMALLOC=`
# turns it off; another path points it elsewhere.
JEMALLOC ?= $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 /usr/lib64/libjemalloc.so.2 /usr/lib/libjemalloc.so.2))
PRELOAD := $(if $(JEMALLOC),LD_PRELOAD=$(JEMALLOC) )
RUN := $(PRELOAD)$(PY)

# Creates .venv from the committed lock when it is missing (idempotent: a stamp records the lock hash).
# On a CPU-only machine, `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes the lock's torch
# release as a CPU wheel from PyTorch's index first (PyPI's Linux wheel is the multi-GB CUDA build); the lock
# itself stays PyPI-only, so it resolves the same everywhere.
TORCH_INDEX ?=
setup: .venv/.stamp
.venv/.stamp: requirements.lock pyproject.toml
	@test -x $(PY) || python3.11 -m venv .venv || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(TORCH_INDEX)" ]; then $(PY) -m pip install -q --retries 1 --timeout 15 --index-url $(TORCH_INDEX) "$$(grep '^torch==' requirements.lock)" \
	  || echo "setup: $(TORCH_INDEX) did not serve torch; it comes from the lock's index instead"; fi
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	@touch $@

# The benchmark data (data/manifest.yaml): verified in TALENTRL_DATA_DIR (default ../shared/data), missing files
# fetched from their public sources at the pinned revisions (derived ones rebuilt from their pinned sources).
data: setup
	$(PY) -m pipeline.data

# The demo needs only the files its run reads (TextWorld games are generated; the tiny model's tokenizer is
# trained on 13 benchmark files): `pipeline.data --for` verifies and fetches just those.
demo: setup
	$(PY) -m pipeline.data --for experiment=demo
	$(RUN) -m pipeline.demo

# dvc repro with the venv's dvc and python (stage commands run `python -m pipeline.run <stage> --params params.yaml`).
repro: setup data
	$(PRELOAD)dvc repro

# The longer CPU run of issue 6 (1 h 47 min on 2 cores, measured): same chain, experiment=cpu_full, also recorded in DVC.
cpu-full: setup
	$(RUN) -m pipeline.demo experiment=cpu_full

# WebShop (1,000 products, 500 test goals): same chain with experiment=webshop_prompt_loss (P5's settings; ~11 h on 2
# cores, every stage resumes: docs/webshop.md), also recorded in DVC.
webshop: setup data
	$(RUN) -m pipeline.demo experiment=webshop_prompt_loss

# ALFWorld (3,553 train games, valid_seen / valid_unseen): same chain with experiment=alfworld_prompt_loss (~12 h on 2 cores;
# every stage resumes, so re-running continues where a stop left it: docs/alfworld.md).
alfworld: setup data
	$(RUN) -m pipeline.demo experiment=alfworld_prompt_loss

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
