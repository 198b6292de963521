# IAM linter: cloudsplaining in its own venv (its policy_sentry pins boto3 and click versions of its
# own), run by tests/infra/template/test_iam_lint.py over the template's and Terraform's policies.
# requirements/cloudsplaining.txt pins cloudsplaining (0.9.1) and every transitive package.
CLOUDSPLAINING_VENV := .venv-cloudsplaining
CLOUDSPLAINING_REQUIREMENTS := requirements/cloudsplaining.txt
CLOUDSPLAINING_STAMP := $(CLOUDSPLAINING_VENV)/.stamp

# The test runs this interpreter (and fails, not skips, when it is missing).
export SERVINGCTL_CLOUDSPLAINING_PYTHON := $(abspath $(CLOUDSPLAINING_VENV))/bin/python

$(CLOUDSPLAINING_STAMP): $(CLOUDSPLAINING_REQUIREMENTS) $(VENV)/.stamp
	@test -n "$(PY312)" || { echo "python3.12 not found (pyenv or PATH): the IAM linter's venv needs it"; exit 1; }
	rm -rf $(CLOUDSPLAINING_VENV)
	$(PY312) -m venv $(CLOUDSPLAINING_VENV)
	$(UV) pip install --python $(CLOUDSPLAINING_VENV)/bin/python -q -r $(CLOUDSPLAINING_REQUIREMENTS)
	touch $@

.PHONY: iam-lint
iam-lint: setup $(CLOUDSPLAINING_STAMP) ## IAM linter (cloudsplaining) over the template's and Terraform's policies
	$(VENV)/bin/pytest -q -s tests/infra/template/test_iam_lint.py $(PYTEST_ARGS)

TEST_DEPS += $(CLOUDSPLAINING_STAMP)
