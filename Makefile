# Two commands are all a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The CDK CLI, from npm, pinned; only `make deploy` and `make bootstrap` use it.
CDK    := npx --yes aws-cdk@2.1148.1
# Context for the CDK app, e.g. make synth CONTEXT="-c stage=prod -c shard_count=8"
CONTEXT ?=

.PHONY: run test lint format typecheck bench clean help synth deploy bootstrap verify-grants

help:
	@echo "make run    set up and start dynacron locally (API on http://127.0.0.1:8080)"
	@echo "make test   set up, lint, type-check and run the whole test suite"
	@echo "make lint   ruff + mypy only"
	@echo "make bench  run the benchmarks and regenerate BENCHMARKS.md (BENCH_QUICK=1: shorter)"
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
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: lint
	$(BIN)/pytest

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[local,dev,bench]'
	touch $(BENCH_STAMP)

# Not part of `make test`: about 15 minutes (BENCH_QUICK=1 for a short run);
# writes bench/results/*.json and regenerates BENCHMARKS.md with its plots.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run

# Not part of `make test`: removes each granted action in turn and reruns
# tests/deployed; lists every removal no scenario notices (docs/deploy.md).
verify-grants: $(STAMP)
	$(BIN)/python -m tests.deployed.verify_grants -j 2

synth: $(STAMP)
	$(BIN)/python -m infra.app $(CONTEXT)

bootstrap: $(STAMP)
	$(CDK) bootstrap --app "$(BIN)/python -m infra.app $(CONTEXT)"

deploy: synth
	$(CDK) deploy --app cdk.out --all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache cdk.out build
