# training-node-agent. `make run` and `make test` work on any Linux box: no root, GPU or cloud needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
LISTEN ?= 127.0.0.1:9477

.PHONY: run test lint fmt demo lab bench clean fakenvml

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

# the suite also needs the test tools and CPU PyTorch (the example training loop runs in a test)
$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,examples]'
	@touch $@

FAKE_NVML := build/fakenvml/libnvidia-ml.so.1
fakenvml: $(FAKE_NVML)
$(FAKE_NVML): $(wildcard fakenvml/*.c fakenvml/*.h)
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden -o $@ $(filter %.c,$^) -ldl -pthread

# With FAKE_NVML_STATE=path/to/state.json the agent sees the fake GPUs that file describes.
run: $(STAMP) fakenvml
	$(if $(FAKE_NVML_STATE),LD_LIBRARY_PATH=$(CURDIR)/build/fakenvml) $(BIN)/training-node-agent run --config configs/dev.toml --listen $(LISTEN) --state-dir .state

# as root, the system packages the suite needs (.ci/apt-packages) are installed first; otherwise one
# line names the missing ones
test: $(TEST_STAMP) fakenvml
	@.ci/system-packages
	$(BIN)/python -m pytest -q -ra $(PYTEST_ARGS)

# the first thing to run: simulator, fake GPUs, a toy trainer and the agent, about a minute, no root
demo: $(STAMP) fakenvml
	$(BIN)/training-node-agent demo

# the classifier's scenario lab: the real agent watches a synthetic trainer doing each work pattern
# (needs root: cgroups, a network namespace, tc); prints the confusion matrix, writes bench/out/
lab: $(TEST_STAMP) fakenvml
	$(BIN)/python -m pytest -q -s -m lab tests/classifier/test_classifier_lab.py $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check agent tests bench examples lab
	$(BIN)/ruff format --check agent tests bench examples lab

fmt: $(TEST_STAMP)
	$(BIN)/ruff format agent tests bench examples lab
	$(BIN)/ruff check --fix agent tests bench examples lab

clean:
	rm -rf $(VENV) build .state .pytest_cache .ruff_cache
