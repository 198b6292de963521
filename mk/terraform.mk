# Terraform data plane checks. No terraform binary runs here: the tests parse every .tf with
# python-hcl2 (main venv) and run checkov. checkov ships bc-python-hcl2, which overwrites
# python-hcl2, so it lives in its own venv.
# requirements/checkov.txt pins checkov (3.3.30) and every transitive package.
CHECKOV_REQUIREMENTS := requirements/checkov.txt
CHECKOV_STAMP := $(CHECKOV_VENV)/.stamp

# tests/unit/terraform runs this binary (and fails, not skips, when it is missing).
export SERVINGCTL_CHECKOV := $(abspath $(CHECKOV_VENV))/bin/checkov

$(CHECKOV_STAMP): $(CHECKOV_REQUIREMENTS) $(VENV)/.stamp
	@test -n "$(PY312)" || { echo "python3.12 not found (pyenv or PATH): the checkov venv needs it"; exit 1; }
	rm -rf $(CHECKOV_VENV)
	$(PY312) -m venv $(CHECKOV_VENV)
	$(UV) pip install --python $(CHECKOV_VENV)/bin/python -q -r $(CHECKOV_REQUIREMENTS)
	touch $@

.PHONY: checkov tf-check
checkov: $(CHECKOV_STAMP) ## checkov in its own venv
tf-check: setup $(CHECKOV_STAMP) ## Terraform tests: HCL parse, registry contract, checkov
	$(VENV)/bin/pytest -q tests/unit/terraform $(PYTEST_ARGS)

TEST_DEPS += $(CHECKOV_STAMP)
