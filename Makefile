# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-quick setup check lint bench bench-peers clean

demo: setup
	$(BIN)/python examples/wordcount.py

test: setup
	$(BIN)/python -m pytest

test-quick: setup
	$(BIN)/python -m pytest -m "not integration and not slow"

setup: $(VENV)/.installed check

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "epochal needs Python 3.11 or newer; set PYTHON=python3.11 (or newer) and retry")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

check:
	@$(BIN)/python -m epochal check

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m benchmarks.throughput

# epochal vs PyFlink, Spark Structured Streaming, Bytewax (installs each into .venv-peers/ on first use)
bench-peers: setup
	$(BIN)/python -m benchmarks.peers

clean:
	rm -rf $(VENV) .venv-peers build *.egg-info src/*.egg-info .pytest_cache benchmarks/results
