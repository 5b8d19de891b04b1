# training-node-agent. `make run` and `make test` work on any Linux box: no root, GPU or cloud needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
LISTEN ?= 127.0.0.1:9477

.PHONY: run test lint fmt demo lab bench clean fakenvml client-venv typecheck test-loaded real-gpu-check

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

# the suite also needs the test tools and CPU PyTorch (the example training loop runs in a test)
$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,examples]'
	@touch $@

# A training environment as a user has it: the client package alone (no agent, none of its
# dependencies) with CPU PyTorch and pinned Lightning, transformers and accelerate. Built once, reused;
# the client itself is reinstalled (built as a wheel from client/) whenever its sources change.
CLIENT_VENV := build/client-venv
CLIENT_PINS := torch==2.13.0 lightning==2.6.6 transformers==5.18.0 accelerate==1.15.0
$(CLIENT_VENV)/.frameworks:
	@test -x $(CLIENT_VENV)/bin/python || $(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/pip install -q $(CLIENT_PINS)
	@# lightning's fsspec[http] and huggingface_hub's CLI pull these in; the client needs neither
	$(CLIENT_VENV)/bin/pip uninstall -q -y aiohttp pydantic pydantic-core
	@touch $@
$(CLIENT_VENV)/.client: $(CLIENT_VENV)/.frameworks client/pyproject.toml $(wildcard client/tna_client/*.py)
	$(CLIENT_VENV)/bin/pip install -q --no-deps --force-reinstall ./client
	@touch $@
client-venv: $(CLIENT_VENV)/.client

FAKE_NVML := build/fakenvml/libnvidia-ml.so.1
fakenvml: $(FAKE_NVML)
$(FAKE_NVML): $(wildcard fakenvml/*.c fakenvml/*.h)
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden -o $@ $(filter %.c,$^) -ldl -pthread

# With FAKE_NVML_STATE=path/to/state.json the agent sees the fake GPUs that file describes.
run: $(STAMP) fakenvml
	$(if $(FAKE_NVML_STATE),LD_LIBRARY_PATH=$(CURDIR)/build/fakenvml) $(BIN)/training-node-agent run --config configs/dev.toml --listen $(LISTEN) --state-dir .state

# as root, the system packages the suite needs (.ci/apt-packages) are installed first; otherwise one
# line names the missing ones. Two phases (tests/phases.py): the files that do not time themselves side
# by side (TNA_TEST_WORKERS, default cores + 1), then the lab and the self-timing tests alone; one total
test: $(TEST_STAMP) fakenvml client-venv
	@.ci/system-packages
	$(BIN)/python tests/phases.py $(PYTEST_ARGS)

# the suite TEST_LOADED_RUNS times in a row beside `stress-ng --cpu 1`, from a clean clone of HEAD, stopping
# at the first failure (as root, on an otherwise idle box; about 25 minutes a run on 2 cores)
TEST_LOADED_RUNS ?= 5
test-loaded:
	.ci/test-loaded $(TEST_LOADED_RUNS)

# the first thing to run: simulator, fake GPUs, a toy trainer and the agent, about a minute, no root
demo: $(STAMP) fakenvml
	$(BIN)/training-node-agent demo --html bench/out/demo-report.html

# the classifier's scenario lab: the real agent watches a synthetic trainer doing each work pattern
# (needs root: cgroups, a network namespace, tc); prints the confusion matrix, writes bench/out/
# a larger draw than the suite's: TNA_LAB_DRAWS draws of the held-out seeds (TNA_LAB_SEEDS=tune: the tuning ones)
TNA_LAB_DRAWS ?= 40
# and TNA_LAB_INPUT_DRAWS of the input families (issue 23), from seeds of their own
TNA_LAB_INPUT_DRAWS ?= 16
# runs in a row of the capped-link collective at default settings (the suite: 2)
TNA_LAB_CAPPED_RUNS ?= 5
# and TNA_LAB_SLOW_DRAWS of the lockstep job whose GPU turns slow halfway (the suite: 1); and the PyTorch
# jobs at default settings the suite has no time for (compute, a synchronous save, throttled reads).
# The fake GPUs' readings are drawn per GPU from TNA_LAB_READINGS_SEED (docs/fake-nvml.md)
TNA_LAB_SLOW_DRAWS ?= 6
# and TNA_LAB_LONG_DRAWS with steps of 0.1-2 s for an agent at its default settings (issue 32; the suite: 0)
TNA_LAB_LONG_DRAWS ?= 20
# and TNA_LAB_HOST_DRAWS of the host-side shapes' PyTorch jobs at default settings (issue 48: launch
# overhead, pageable copies, a synchronous save to a slow volume; the suite: one a run, in turn by day)
TNA_LAB_HOST_DRAWS ?= 12
# and TNA_LAB_DUTY_DRAWS whose GPUs work 30-70% of each step and lose the rest to one cause (the suite: 0)
TNA_LAB_DUTY_DRAWS ?= 16
# and TNA_LAB_SECOND_DRAWS compute jobs losing 15-25% of the time to one cause, or nothing (the suite: 0)
TNA_LAB_SECOND_DRAWS ?= 8
# and TNA_LAB_ADVICE_DRAWS pairs of the advice's lab (issue 45: a PyTorch job on fake H20s, then on fake
# L20s; the suite: 1, a compute job), two of each family
TNA_LAB_ADVICE_DRAWS ?= 8
lab: $(TEST_STAMP) fakenvml
	TNA_LAB_DEFAULTS_ALL=1 TNA_LAB_LONG_DRAWS=$(TNA_LAB_LONG_DRAWS) TNA_LAB_HOST_DRAWS=$(TNA_LAB_HOST_DRAWS) TNA_LAB_DUTY_DRAWS=$(TNA_LAB_DUTY_DRAWS) TNA_LAB_SECOND_DRAWS=$(TNA_LAB_SECOND_DRAWS) TNA_LAB_ADVICE_DRAWS=$(TNA_LAB_ADVICE_DRAWS) TNA_LAB_DRAWS=$(TNA_LAB_DRAWS) TNA_LAB_INPUT_DRAWS=$(TNA_LAB_INPUT_DRAWS) TNA_LAB_CAPPED_RUNS=$(TNA_LAB_CAPPED_RUNS) TNA_LAB_SLOW_DRAWS=$(TNA_LAB_SLOW_DRAWS) $(BIN)/python -m pytest -q -s -m lab tests/classifier/test_classifier_lab.py tests/classifier/test_classifier_slowgpu_lab.py tests/classifier/test_classifier_host_lab.py tests/ledger/test_ledger_lab.py tests/advice/test_advice_lab.py $(PYTEST_ARGS)

# the real-GPU check (bench/real_gpu.py; docs/gpu.md, "Checking on a real H200"): every NVML call, the
# readings' timing and the agent's verdict on real CUDA training, about 8 minutes on one GPU and never
# more than REAL_GPU_BUDGET seconds, into REAL_GPU_OUT/real_gpu.json and real_gpu.log. The venv's python
# where there is one, else python3 (a GPU machine's, with torch and nvidia-ml-py); with FAKE_NVML_STATE
# the fake NVML, and the CUDA stages skip saying why
REAL_GPU_OUT ?= build/real-gpu
REAL_GPU_BUDGET ?= 480
real-gpu-check: $(if $(FAKE_NVML_STATE),$(FAKE_NVML))
	$(if $(FAKE_NVML_STATE),LD_LIBRARY_PATH=$(CURDIR)/build/fakenvml) $(if $(wildcard $(BIN)/python),$(BIN)/python,python3) bench/real_gpu.py $(REAL_GPU_OUT) --budget-seconds $(REAL_GPU_BUDGET)

lint: $(TEST_STAMP)
	$(BIN)/ruff check agent client tests bench examples lab
	$(BIN)/ruff format --check agent client tests bench examples lab

# mypy over agent/ (configured in pyproject.toml)
typecheck: $(TEST_STAMP)
	$(BIN)/mypy

fmt: $(TEST_STAMP)
	$(BIN)/ruff format agent client tests bench examples lab
	$(BIN)/ruff check --fix agent client tests bench examples lab

clean:
	rm -rf $(VENV) build .state .pytest_cache .ruff_cache
