# A fresh machine needs only: make demo, make test. A GPU box: make run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo run test lint bench screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
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

screenshots: setup
	$(BIN)/python screenshots/generate.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
