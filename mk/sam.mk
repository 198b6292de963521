# SAM control plane checks: `sam validate --lint` (offline) and `sam build` (layer + functions with
# the Lambda runtime's Python) run as part of `make test`, and again only when their inputs change.
# aws-sam-cli pins many packages of its own (cfn-lint, boto3, ...), so it gets its own venv rather
# than clashing with the main one.
SAM_CLI_VERSION := 1.170.0
SAM := $(SAM_VENV)/bin/sam
SAM_VENV_STAMP := $(SAM_VENV)/.stamp-$(SAM_CLI_VERSION)
SAM_BUILD_DIR := .aws-sam/build
# Everything `sam build` packs; caches and editable-install metadata do not count as changes.
SAM_INPUTS := template.yaml samconfig.toml $(shell find functions layers/core statemachine -type f \
	-not -path '*/__pycache__/*' -not -path '*.egg-info/*' 2>/dev/null)

export SAM_CLI_TELEMETRY := 0
# The template tests translate template.yaml with this venv's SAM translator.
export SERVINGCTL_SAM_PYTHON := $(abspath $(SAM_VENV))/bin/python

$(SAM_VENV_STAMP): $(VENV)/.stamp
	@test -n "$(PY312)" || { echo "python3.12 not found (pyenv or PATH): sam build needs the runtime's Python"; exit 1; }
	rm -rf $(SAM_VENV)
	$(PY312) -m venv $(SAM_VENV)
	$(UV) pip install --python $(SAM_VENV)/bin/python -q aws-sam-cli==$(SAM_CLI_VERSION)
	touch $@

.aws-sam/.stamp-validate: $(SAM_VENV_STAMP) template.yaml samconfig.toml
	$(SAM) validate --lint --template template.yaml
	@mkdir -p $(@D) && touch $@

# The python3.12 builder looks for `python3.12` on PATH: put the runtime's interpreter first.
.aws-sam/.stamp-build: $(SAM_VENV_STAMP) $(SAM_INPUTS)
	export PATH=$(dir $(PY312)):$$PATH && $(SAM) build --template template.yaml --build-dir $(SAM_BUILD_DIR)
	@touch $@

.PHONY: sam-check sam-validate sam-build
sam-validate: .aws-sam/.stamp-validate ## sam validate --lint (offline)
sam-build: .aws-sam/.stamp-build ## sam build (layer + functions, python3.12)
sam-check: sam-validate sam-build ## both SAM checks

TEST_DEPS += .aws-sam/.stamp-validate .aws-sam/.stamp-build
