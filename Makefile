# servingctl: every target sets up what it needs on a fresh machine (venvs, npm tools, the tiny
# model) and is a no-op the second time. The interpreters come from pyenv when it is there.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $$HOME/.pyenv)
PY312 ?= $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3.12))),$(shell command -v python3.12))
PY311 ?= $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.11.*/bin/python3.11))),$(shell command -v python3.11))

VENV        := .venv
VLLM_VENV   := .venv-vllm
SAM_VENV    := .venv-sam
CHECKOV_VENV := .venv-checkov
TINY_MODEL  := .cache/tiny-llama
PYTEST_ARGS ?=
# uv (from PyPI, installed into the main venv) installs every other venv: pip took minutes for them.
UV_VERSION  := 0.13.8
UV          := $(abspath $(VENV))/bin/uv

export SERVINGCTL_VLLM_PYTHON := $(abspath $(VLLM_VENV))/bin/python
export SERVINGCTL_TINY_MODEL := $(abspath $(TINY_MODEL))

# Extra prerequisites of `make test` and `make demo`, added by the fragments in mk/.
TEST_DEPS :=
DEMO_DEPS :=

.PHONY: help setup test demo unit infra lint clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# ---- environments -----------------------------------------------------------------------------
$(VENV)/.stamp: pyproject.toml cli/pyproject.toml twin/pyproject.toml constraints.txt
	@test -n "$(PY312)" || { echo "python3.12 not found (pyenv or PATH): it is the Lambda runtime"; exit 1; }
	$(PY312) -m venv $(VENV)
	$(VENV)/bin/pip install -q uv==$(UV_VERSION)
	$(UV) pip install --python $(VENV)/bin/python -q -c constraints.txt -e '.[client,dev]' -e ./cli -e ./twin
	touch $@

setup: $(VENV)/.stamp ## main venv (the product, the command line and the twin, editable; test tools)

clean: ## remove every venv, build and cache
	rm -rf $(VENV) $(VLLM_VENV) $(SAM_VENV) $(CHECKOV_VENV) $(CLOUDSPLAINING_VENV) node_modules .cache .aws-sam

# Each area owns one fragment: mk/vllm.mk (real vLLM venv + tiny model), mk/sam.mk, mk/node.mk,
# mk/terraform.mk. They add their stamps to TEST_DEPS / DEMO_DEPS.
include $(sort $(wildcard mk/*.mk))

# ---- test suites ------------------------------------------------------------------------------
# ruff (lint and format), mypy (strict on the product, checked on cli/ and local/) and the import
# contracts, all configured in pyproject.toml: the same commands with no arguments check the same.
lint: setup ## ruff check, ruff format --check, mypy, import contracts (which package may import which)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: setup ## fast unit tests
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

# The infrastructure code checked by its own tools and against the code: template.yaml (SAM
# translate, cfn-lint, checkov, sam build, the IAM linter, the ASL files and the error-name contract)
# and the Terraform data plane (fmt, validate, terraform test with a mock provider, checkov).
infra: setup $(TEST_DEPS) ## infrastructure checks: template.yaml, state machines, Terraform, checkov, IAM linter
	$(VENV)/bin/pytest -q -n 2 tests/infra $(PYTEST_ARGS)

# The twin patches moto and turns on its state machine execution for the whole process, so the
# suites that use plain moto (unit) run in processes of their own, apart from the twin's.
# Each integration module runs one twin and mostly waits on its scaled clock (about half of two
# cores busy): four xdist workers (11 min against 14 with three, on 2 cores),
# a module's tests kept on one worker with its twin (--dist loadfile). The schemathesis module runs
# apart: its generated tests share one node id, which xdist would report as one test.
INTEGRATION_SERIAL := tests/integration/api/test_fuzz_api.py
test: lint $(TEST_DEPS) ## everything: lint (ruff, mypy, import contracts), unit, infra, integration (state machines on the twin), e2e (real vLLM)
	SERVINGCTL_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q -n 2 tests/unit $(PYTEST_ARGS)
	SERVINGCTL_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q -n 2 tests/infra $(PYTEST_ARGS)
	SERVINGCTL_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q -n 4 --dist loadfile tests/integration --ignore=$(INTEGRATION_SERIAL) $(PYTEST_ARGS)
	SERVINGCTL_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q $(INTEGRATION_SERIAL) $(PYTEST_ARGS)
	SERVINGCTL_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q tests/e2e $(PYTEST_ARGS)

demo: setup $(DEMO_DEPS) ## the main path on the local twin with the real vLLM: start, benchmark, report, stop, ledger
	$(VENV)/bin/python -m servingctl_twin.demo --output demo-output
