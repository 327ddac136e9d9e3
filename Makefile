# Two commands are all a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Lambda runs the functions on this Python (infra/layer.py's PYTHON_VERSION), the
# tests on $(PYTHON): `make test` runs tests/unit and tests/deployed on it too, in
# a venv of its own, when an interpreter of it is found (python3.12 on the PATH, or
# pyenv's). Debian 12's packages and PyPI offer none; the machine image has pyenv's.
LAMBDA_PYTHON := 3.12
ifndef PYTHON312
PYTHON312 := $(shell for candidate in python$(LAMBDA_PYTHON) \
	$${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(LAMBDA_PYTHON).*/bin/python$(LAMBDA_PYTHON); do \
	$$candidate -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
endif
VENV312  := .venv312
STAMP312 := $(VENV312)/.installed
# What runs on it: the unit tier (the pure code, all of it), and the deployed
# scenarios that run each Lambda entry point with the template's environment:
# test_scenarios (api, tick, claim, worker, undelivered, reaper), test_tracked_runs
# (completions), test_user_stack (a user's own worker code). The rest of
# tests/deployed runs these same entry points again, on grants, failover and
# concurrency: that is the template's and the code's, not the interpreter's, and
# $(PYTHON) runs it. (All of tests/deployed took the 3.12 run to 112 s in CI.)
LAMBDA_PYTHON_TESTS := tests/unit $(wildcard $(addprefix tests/deployed/,test_scenarios.py \
	test_tracked_runs.py test_user_stack.py))

# The CDK CLI, from npm, pinned; only `make deploy` and `make bootstrap` use it.
CDK    := npx --yes aws-cdk@2.1148.1
# Context for the CDK app, e.g. make synth CONTEXT="-c stage=prod -c shard_count=8"
CONTEXT ?=

# The browser tests (tests/browser): Debian's Chromium, driven by Playwright (pip,
# in the dev extra; it downloads no browser), and axe-core from npm, pinned and
# checked, unpacked into build/ (git-ignored). `make test` installs what it can
# and otherwise stops naming what to install: the browser tests never skip.
CHROMIUM    ?= /usr/bin/chromium
AXE_VERSION := 4.14.1
AXE_SHA256  := 29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c
AXE_DIR     := build/axe-core
AXE         := $(AXE_DIR)/axe.min.js
export DYNACRON_CHROMIUM := $(CHROMIUM)
export DYNACRON_AXE := $(CURDIR)/$(AXE)

.PHONY: run test unit contract test-lambda-python lint format typecheck bench clean help synth deploy bootstrap verify-grants browser-deps chromium screenshots

help:
	@echo "make run    set up and start dynacron locally (API on http://127.0.0.1:8080)"
	@echo "make test   set up, lint, type-check and run the whole test suite (unit and deployed tiers on Lambda's Python 3.12 too)"
	@echo "make unit   tests/unit only (pure domain; seconds), while you work; make test is the gate"
	@echo "make contract  tests/contract only (one suite over both adapter sets)"
	@echo "make lint   ruff + mypy only"
	@echo "make screenshots  regenerate the console's pictures in docs/images/ (README)"
	@echo "make bench  run the benchmarks and regenerate BENCHMARKS.md (BENCH_QUICK=1: shorter; BENCH=cost: one section)"
	@echo "make verify-grants  remove each IAM grant in turn; list those no deployed-tier scenario needs"
	@echo "make synth  build the Lambda layers and write the CloudFormation app to cdk.out/ (no AWS account needed)"
	@echo "make deploy synth, then deploy with the CDK CLI (needs AWS credentials; see docs/deploy.md)"
	@echo "make clean  remove the virtualenv and caches"

BENCH_STAMP := $(VENV)/.bench-installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[local,dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/dynacron local --port 8080

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	# Once more against Lambda's Python: typeshed knows what its stdlib removed.
	$(BIN)/mypy --python-version $(LAMBDA_PYTHON)

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite runs in two processes: half of it waits (handlers held, leases running
# out, processes starting), the rest keeps a core busy. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := pytest -n $(TEST_WORKERS) --dist worksteal

test: lint browser-deps
	$(BIN)/$(PYTEST)
	$(MAKE) test-lambda-python

# The quick tiers alone, while you work (tests/README.md says what each tier needs);
# `make test` stays the gate: lint, every tier, and Lambda's Python.
unit: $(STAMP)
	$(BIN)/$(PYTEST) tests/unit

contract: $(STAMP)
	$(BIN)/$(PYTEST) tests/contract

browser-deps: chromium $(AXE)

chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "Installing Debian's chromium for the browser tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "The browser tests need Chromium at $(CHROMIUM). Install it (Debian/Ubuntu:" \
				"sudo apt-get install chromium), or name another: make test CHROMIUM=/path/to/chromium"; \
			exit 1; \
		fi; \
	fi

# npm checks the package against the registry's integrity hash; the pinned digest
# of the one file we use is checked here too.
$(AXE):
	@command -v npm >/dev/null || { echo "The browser tests need axe-core from npm: install Node.js and npm (Debian: apt-get install npm)"; exit 1; }
	rm -rf $(AXE_DIR) && mkdir -p $(AXE_DIR)
	cd $(AXE_DIR) && npm pack --silent axe-core@$(AXE_VERSION) >/dev/null \
		&& tar -xzf axe-core-$(AXE_VERSION).tgz package/axe.min.js package/LICENSE \
		&& mv package/axe.min.js package/LICENSE . && rm -rf package axe-core-$(AXE_VERSION).tgz
	echo "$(AXE_SHA256)  $(AXE)" | sha256sum --check --quiet - || { rm -rf $(AXE_DIR); exit 1; }

# Pictures of the console for the README (docs/images/), from a local mode with a
# few realistic tasks; not part of `make test`.
screenshots: $(STAMP) browser-deps
	$(BIN)/python -m tests.browser.screenshots

$(STAMP312): pyproject.toml
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/pip install --quiet --upgrade pip
	$(VENV312)/bin/pip install --quiet -e '.[local,dev]'
	touch $(STAMP312)

ifeq ($(strip $(PYTHON312)),)
test-lambda-python:
	@echo "No Python $(LAMBDA_PYTHON) interpreter found, and the tests must also pass on Lambda's Python."
	@echo "Install one (pyenv install $(LAMBDA_PYTHON), or your system's python$(LAMBDA_PYTHON) package) or name it:"
	@echo "make test PYTHON312=/path/to/python$(LAMBDA_PYTHON); to run on $$($(PYTHON) --version) only, say so: make test PYTHON312=none"
	@exit 1
else ifeq ($(strip $(PYTHON312)),none)
test-lambda-python:
	@echo "!! PYTHON312=none: $(LAMBDA_PYTHON_TESTS) ran on $$($(PYTHON) --version) only, not on Lambda's Python $(LAMBDA_PYTHON)"
else
test-lambda-python: $(STAMP312)
	$(VENV312)/bin/$(PYTEST) $(LAMBDA_PYTHON_TESTS)
endif

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[local,dev,bench]'
	touch $(BENCH_STAMP)

# Not part of `make test`: about 15 minutes (BENCH_QUICK=1 for a short run);
# writes bench/results/*.json and regenerates BENCHMARKS.md with its plots.
# BENCH names the sections to run (e.g. BENCH=cost); all of them when empty.
BENCH ?=
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run $(BENCH)

# Not part of `make test`: removes each granted action in turn and reruns
# tests/deployed; lists every removal no scenario notices (docs/deploy.md).
verify-grants: $(STAMP)
	$(BIN)/python -m tests.deployed.verify_grants -j 2

synth: $(STAMP)
	$(BIN)/python -m infra.app $(CONTEXT)

bootstrap: $(STAMP)
	$(CDK) bootstrap --app "$(BIN)/python -m infra.app $(CONTEXT)"

# After the deploy, tasks written before the name index get their name key
# (decision 0045): once per stack, recorded in its coordination table; later
# deploys read the record and go on. Tasks stored before the schedule census are
# counted in it (decision 0046): each tenant's uncounted tasks, none twice.
deploy: synth
	$(CDK) deploy --app cdk.out --all --outputs-file cdk.out/outputs.json
	$(BIN)/dynacron admin backfill-name-keys --outputs-file cdk.out/outputs.json
	$(BIN)/dynacron admin backfill-tenant-parts --outputs-file cdk.out/outputs.json
	$(BIN)/dynacron admin backfill-census --outputs-file cdk.out/outputs.json

clean:
	rm -rf $(VENV) $(VENV312) .pytest_cache .mypy_cache .ruff_cache cdk.out build
