# Two entry points, each of which sets up a virtualenv on a fresh clone first:
#   make demo   -- the streaming enrichment demo on local Spark (no servers needed)
#   make test   -- ruff, mypy and the whole pytest suite (what .ci/run calls)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,redis,postgres,adbc]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lookup demo

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
