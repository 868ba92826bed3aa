# A fresh machine needs only: make demo, make test. A GPU box: make run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: setup demo run test lint bench soak screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# CPU torch for the agent's tests (on these machines this exact version is a local CPU build).
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION) || echo "torch not installed: its tests will skip"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/gputui --demo

run: setup
	$(BIN)/gputui

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check gputui tests bench

bench: setup
	$(BIN)/python bench/run.py

SOAK_S ?= 1800
soak: setup
	$(BIN)/python bench/soak.py --seconds $(SOAK_S)

screenshots: setup
	$(BIN)/python screenshots/generate.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
