# A fresh machine needs only: make demo, make test. A GPU box: make run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The agent's tests and `make bench` use a CPU-only torch; the monitor itself never imports it.
TORCH_VERSION   ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_STAMP     := $(VENV)/.torch-$(TORCH_VERSION)
# `make test-min`: every runtime dependency at exactly its declared floor (tests/minimum_versions.py).
MIN_VENV   := .venv-min
MIN_BIN    := $(MIN_VENV)/bin
MIN_STAMP  := $(MIN_VENV)/.installed
MIN_EXTRAS := prometheus
MIN_TESTS  := tests/collect tests/export tests/ui tests/test_cli.py tests/test_cli_help.py
LINTED     := gputui tests bench screenshots
# Narrower runs: make test PYTEST_ARGS='tests/export -x' (test-min runs MIN_TESTS without it), or by marker:
# PYTEST_ARGS="-m 'not slow and not terminal'". Both run on pytest-xdist's WORKERS processes (auto: one a
# core; WORKERS=0: one process, as `--snapshot-update` needs), a test file to a worker: a module's fixtures
# (a built wheel, a Prometheus server) are made once, not once a worker.
PYTEST_ARGS ?=
WORKERS     ?= auto
XDIST       := -n $(WORKERS) --dist loadfile

.PHONY: setup torch demo run test test-min lint bench soak screenshots gpu-wheels gpu-check clean

# A venv's own .gitignore keeps it out of `git status` (Python 3.13's venv writes one itself).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	echo '*' > $(VENV)/.gitignore
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# A CPU-only torch, never a multi-GB CUDA build: the CPU wheel index first; else only a build this
# machine serves itself (pip's configured find-links, --no-index: nothing is downloaded), its small
# pure-Python dependencies from the index; else one line, and the torch tests skip. pip's complaints go
# to TORCH_LOG. No stamp when it failed: the next `make test` tries again.
TORCH_LOG := $(VENV)/torch-install.log
$(TORCH_STAMP): $(STAMP)
	@if $(BIN)/python -m pip install -q --retries 0 --index-url $(TORCH_CPU_INDEX) torch==$(TORCH_VERSION) \
		2>$(TORCH_LOG); then \
		touch $@; \
	elif $(BIN)/python -m pip install -q --no-index --no-deps torch==$(TORCH_VERSION) 2>>$(TORCH_LOG) \
		&& $(BIN)/python -m pip install -q torch==$(TORCH_VERSION) 2>>$(TORCH_LOG); then \
		touch $@; \
	else \
		echo "torch $(TORCH_VERSION) (CPU) could not be installed (see $(TORCH_LOG)): the torch tests will skip"; \
	fi

torch: $(TORCH_STAMP)

demo: setup
	$(BIN)/gputui --demo

run: setup
	$(BIN)/gputui

test: setup torch
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# Pins come from the package's own metadata: installed first without dependencies, then every runtime
# dependency (and MIN_EXTRAS') at its floor, the test tools as declared.
$(MIN_STAMP): pyproject.toml tests/minimum_versions.py
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	echo '*' > $(MIN_VENV)/.gitignore
	$(MIN_BIN)/python -m pip install -q --upgrade pip
	$(MIN_BIN)/python -m pip install -q --no-deps -e .
	$(MIN_BIN)/python tests/minimum_versions.py --extra $(MIN_EXTRAS) > $(MIN_VENV)/requirements.txt
	$(MIN_BIN)/python -m pip install -q -r $(MIN_VENV)/requirements.txt
	$(MIN_BIN)/python -m pip check
	touch $(MIN_STAMP)

test-min: $(MIN_STAMP)
	$(MIN_BIN)/python tests/minimum_versions.py --extra $(MIN_EXTRAS) --check
	$(MIN_BIN)/python -m pytest $(XDIST) $(or $(PYTEST_ARGS),$(MIN_TESTS))

# ruff (style, and the complexity cap), the import contracts ([tool.importlinter]), mypy --strict on the
# package, the tests and the bench ([tool.mypy])
lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: setup torch
	$(BIN)/python bench/run.py

SOAK_S ?= 1800
soak: setup
	$(BIN)/python bench/soak.py --seconds $(SOAK_S)

# `make gpu-check` on a lent GPU machine (a training node: CUDA torch, no Textual, no network): each step
# against the hardware, into GPU_CHECK_OUT (at most 8 files). Without a GPU every step says skipped, why.
# `make gpu-wheels`, here and before: the runtime dependencies such a machine lacks, at this venv's
# versions, for CPython 3.12 on x86-64, into GPU_WHEELS (ignored); carry that folder along.
GPU_WHEELS := .gpu-wheels
GPU_DISTS  := textual rich markdown-it-py mdurl mdit-py-plugins linkify-it-py platformdirs \
	pygments typing-extensions nvidia-ml-py argcomplete
gpu-wheels: setup
	rm -rf $(GPU_WHEELS)
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 --platform any -d $(GPU_WHEELS) \
		$$($(BIN)/python -c 'import sys, importlib.metadata as m; print(*(f"{d}=={m.version(d)}" for d in sys.argv[1:]))' $(GPU_DISTS))
	ls $(GPU_WHEELS)

gpu-check:
	$(PYTHON) -m bench.gpucheck

screenshots: setup
	$(BIN)/python screenshots/generate.py

clean:
	rm -rf $(VENV) $(MIN_VENV) $(GPU_WHEELS) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache \
		.import_linter_cache
