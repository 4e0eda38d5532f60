# The training-run doctor. `make help` lists the targets; variables are set as `make sweep RUNS=/tmp/x`.

PYTHON ?= python3
VENV   ?= .venv
# The torch build to install, as pip arguments. The default is the CPU wheel this machine kind keeps on disk;
# a GPU machine names its CUDA build, e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
TORCH  ?= torch==2.13.0
SWEEP  ?= default
RUNS   ?= runs/$(SWEEP)
JOBS   ?=
FORCE  ?=
ARGS   ?=
RECIPE ?= examples/cnn_no_zero_grad.py

BIN := $(VENV)/bin
# JOBS is joblib's n_jobs: N >= 1 workers, or negative counted back from the CPU cores (-1 every core, -2 all but
# one). Anything else stops here, in one line and before setup runs; `python -m harness` refuses the same values.
ifneq ($(JOBS),)
ifeq ($(shell printf '%s' '$(JOBS)' | grep -Ex -- '-?[1-9][0-9]*'),)
$(error JOBS=$(JOBS) is out of range: it must be a number of workers >= 1, or negative to count back from the CPU cores (-1 every core, -2 all but one))
endif
endif
SWEEP_ARGS := +sweep=$(SWEEP) run.records=$(RUNS) $(if $(JOBS),hydra.sweeper.n_jobs=$(JOBS)) $(if $(FORCE),run.force=true)

.DEFAULT_GOAL := help
.PHONY: help setup sweep smoke zoo early pairs families gpu-study fit report doctor realbugs working docs test test-slow test-all lint format bench bench-doctor bench-engines bench-import bench-loader clean-runs

help: ## list the targets and their variables
	@echo "usage: make <target> [VARIABLE=value ...]"
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-11s %s\n", $$1, $$2}'
	@echo "variables: SWEEP=$(SWEEP) RUNS=$(RUNS) JOBS=(all cores) FORCE=(unset) ARGS=(Hydra overrides)"
	@echo "           RECIPE=$(RECIPE) TORCH=\"$(TORCH)\" PYTHON=$(PYTHON) VENV=$(VENV)"

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev,integrations]"
	touch $@

setup: $(BIN)/.installed ## create .venv with torch (TORCH) and the project (runs again when pyproject.toml changes)

sweep: setup ## run the grid SWEEP (default: 58 conditions x 5 seeds x 2 datasets) into RUNS; resumes, FORCE=1 reruns
	$(BIN)/python -m harness $(SWEEP_ARGS) $(ARGS)

smoke: ## run the tiny smoke grid (4 short cells) into runs/smoke
	$(MAKE) sweep SWEEP=smoke

zoo: setup ## healthy runs under 15 recipes and every fault at 3 sizes on digits + 12 generated problems into runs/zoo; scores them leaving one problem out (about 20 minutes)
	$(MAKE) sweep SWEEP=zoo_faults RUNS=runs/zoo
	$(MAKE) sweep SWEEP=zoo_healthy RUNS=runs/zoo
	$(BIN)/python -m analysis zoo runs/zoo

early: setup ## the rules on RUNS as they were at 50, 100, 200, 400 and 600 steps, each budget with its own thresholds
	$(BIN)/python -m analysis early $(RUNS)

pairs: setup ## two faults per cell (148 pairs x 2 seeds x 2 datasets) into runs/pairs; scores both-named (about 15 minutes)
	$(MAKE) sweep SWEEP=pairs
	$(BIN)/python -m analysis pairs runs/pairs

families: setup ## every fault on a CNN (digits), a GRU and a transformer encoder (sequence task), and a causal LM (stdlib text) into runs/families; scores the MLP's rules there
	$(MAKE) sweep SWEEP=cnn RUNS=runs/families
	$(MAKE) sweep SWEEP=gru RUNS=runs/families
	$(MAKE) sweep SWEEP=transformer RUNS=runs/families
	$(MAKE) sweep SWEEP=lm RUNS=runs/families
	$(BIN)/python -m analysis families runs/families

gpu-study: setup ## the device study (width x batch x cpu/cuda) into runs/devices; prints the crossover table last
	$(MAKE) sweep SWEEP=devices
	$(BIN)/python -m analysis devices runs/devices

fit: setup ## fit the rules' thresholds per step budget on digits and the zoo problems (runs/zoo); writes analysis/thresholds.json
	$(BIN)/python -m analysis fit runs/zoo

docs: setup ## regenerate the tables of docs/ (faults, rules, features, records) from the code and conf/, and docs/doctor.md's example reports
	$(BIN)/python -m doctor.pages

report: setup ## score the rules, naive rules, tree and forest on RUNS (and the zoo, pairs, families); writes reports/report.md
	$(BIN)/python -m analysis report $(RUNS)

doctor: setup ## diagnose a recipe file: make doctor RECIPE=examples/cnn_no_zero_grad.py
	$(BIN)/python -m doctor $(RECIPE)

realbugs: setup ## the doctor on 20 real buggy Keras programs (DeepFD's) and TrainCheck's silent errors, ported to PyTorch with their fixes, 5 seeds, beside the published tools (held out; about 40 minutes)
	$(BIN)/python -m benchmarks.realbugs $(ARGS)

working: setup ## the doctor on working programs re-created from public sources, 3 seeds: how often it calls one sick (held out)
	$(BIN)/python -m benchmarks.working $(ARGS)

test: setup ## run the fast tests (at most 4 minutes on 2 cores: docs/testing.md)
	$(BIN)/python -m pytest -q --durations=10

test-slow: setup ## run only the tests marked slow (end-to-end sweeps, reports, every recipe and loop shape)
	$(BIN)/python -m pytest -q -m slow --durations=25

test-all: setup ## run every test, the slow ones too (what CI runs, in two parts)
	$(BIN)/python -m pytest -q -m ""

lint: setup ## check style with ruff
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: setup ## reformat with ruff
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

bench: setup ## measure grid wall vs its floor, start-up vs its floor, instrument overhead, 2 workers vs 1 (about 5 minutes)
	$(BIN)/python bench/grid.py

bench-engines: setup ## the 100-cell grid on a local Dask cluster against the joblib default (about 3 minutes)
	$(BIN)/python bench/engines.py

bench-doctor: setup ## the doctor's overhead on a user's loop (an MLP, a transformer LM), Lightning and Hugging Face, and its time to a verdict (about 6 minutes)
	$(BIN)/python bench/doctor_overhead.py
	$(BIN)/python bench/integrations_overhead.py

bench-import: setup ## how long `import doctor` takes against `import torch`, and what it loads (about half a minute)
	$(BIN)/python bench/import_time.py

bench-loader: setup ## the loader verdict beside a CPU burner on every core: the starved and the in-memory example, 10 runs each (about 20 minutes)
	$(BIN)/python bench/loader_under_load.py

clean-runs: ## delete every records folder under runs/ (and Hydra's logs there)
	find runs -mindepth 1 -maxdepth 1 ! -name .gitkeep -exec rm -rf {} +
