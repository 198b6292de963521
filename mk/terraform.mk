# Terraform data plane checks: terraform fmt / validate / test (mock AWS provider, no credentials)
# run by tests/infra/terraform, plus checkov in its own venv (checkov ships bc-python-hcl2, which
# overwrites python-hcl2). requirements/checkov.txt pins checkov (3.3.30) and every transitive package.
CHECKOV_REQUIREMENTS := requirements/checkov.txt
CHECKOV_STAMP := $(CHECKOV_VENV)/.stamp

# tests/infra/terraform runs this binary (and fails, not skips, when it is missing).
export SERVINGCTL_CHECKOV := $(abspath $(CHECKOV_VENV))/bin/checkov

$(CHECKOV_STAMP): $(CHECKOV_REQUIREMENTS) $(VENV)/.stamp
	@test -n "$(PY312)" || { echo "python3.12 not found (pyenv or PATH): the checkov venv needs it"; exit 1; }
	rm -rf $(CHECKOV_VENV)
	$(PY312) -m venv $(CHECKOV_VENV)
	$(UV) pip install --python $(CHECKOV_VENV)/bin/python -q -r $(CHECKOV_REQUIREMENTS)
	touch $@

# The AWS provider comes from a local filesystem mirror when the machine has one (a directory
# named tf-plugins near the root, or TF_PLUGIN_DIR=...), otherwise from the registry into a plugin
# cache. Either way the committed .terraform.lock.hcl is checked, never rewritten (-lockfile=readonly).
# Everything terraform writes stays under .cache/ (make clean), nothing in the tree or in ~.
TF_ROOT := infra/terraform
ifeq ($(origin TF_PLUGIN_DIR),undefined)
TF_PLUGIN_DIR := $(firstword $(shell find / -maxdepth 3 -type d -name tf-plugins -not -path '/proc/*' 2>/dev/null))
endif
TF_INIT_SOURCE = $(if $(wildcard $(TF_PLUGIN_DIR)),-plugin-dir=$(abspath $(TF_PLUGIN_DIR)),)
export TF_DATA_DIR ?= $(abspath .cache/terraform)
export TF_PLUGIN_CACHE_DIR := $(abspath .cache/terraform-plugins)
export TF_IN_AUTOMATION := 1
TF_STAMP = $(TF_DATA_DIR)/servingctl-init.stamp

# A test file with `module` blocks (tests/egress.tftest.hcl) needs init to install them too.
$(TF_STAMP): $(wildcard $(TF_ROOT)/*.tf) $(wildcard $(TF_ROOT)/tests/*.tftest.hcl) $(TF_ROOT)/.terraform.lock.hcl
	@command -v terraform >/dev/null || { echo "terraform not found on PATH: install Terraform 1.11 or later"; exit 1; }
	mkdir -p $(TF_PLUGIN_CACHE_DIR)
	cd $(TF_ROOT) && terraform init -backend=false -input=false -lockfile=readonly $(TF_INIT_SOURCE)
	touch $@

.PHONY: checkov tf-init tf-check
checkov: $(CHECKOV_STAMP) ## checkov in its own venv
tf-init: $(TF_STAMP) ## terraform init of infra/terraform (local provider mirror when present)
tf-check: setup $(CHECKOV_STAMP) $(TF_STAMP) ## Terraform tests: fmt, validate, terraform test, registry contract, checkov
	$(VENV)/bin/pytest -q tests/infra/terraform $(PYTEST_ARGS)

TEST_DEPS += $(CHECKOV_STAMP) $(TF_STAMP)
