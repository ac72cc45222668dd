# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The exact versions the tests last passed with; pyproject.toml keeps ranges for library users.
LOCK := constraints.txt

.PHONY: demo test test-quick setup check lint bench bench-peers clean upgrade-deps browser docs

demo: setup
	$(BIN)/python examples/wordcount.py

test: setup browser
	$(BIN)/python -m pytest

# The dashboard's browser test drives Debian's chromium (Playwright never downloads a browser):
# installed here when missing (as root, or with password-less sudo); if that fails the test is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi; \
	  if [ "$$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and chromium-driver (apt-get) for the dashboard's browser test"; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver \
	      >/dev/null || echo "chromium could not be installed: the dashboard's browser test will be skipped"; \
	  else echo "chromium is missing (apt-get install chromium chromium-driver): the dashboard's browser test will be skipped"; fi; }

test-quick: setup
	$(BIN)/python -m pytest -m "not integration and not slow"

setup: $(VENV)/.installed check

$(VENV)/.installed: pyproject.toml setup.py src/epochal/state/rocksdb/_native.c $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "epochal needs Python 3.11 or newer; set PYTHON=python3.11 (or newer) and retry")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --constraint $(LOCK) pip
	$(BIN)/pip install --quiet --constraint $(LOCK) -e ".[dev]"
	touch $@

# Drift on purpose: a fresh .venv with the newest versions pyproject.toml's ranges allow, written to
# $(LOCK), then the whole suite. Commit the new lock once it passes (git diff $(LOCK) shows what moved).
upgrade-deps:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "epochal needs Python 3.11 or newer; set PYTHON=python3.11 (or newer) and retry")'
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --upgrade -e ".[dev]"
	{ echo "# Written by 'make upgrade-deps' on $$(date -u +%Y-%m-%d) with Python $$($(BIN)/python -c 'import platform; print(platform.python_version())')."; \
	  echo "# 'make setup' installs exactly these; pyproject.toml's ranges must admit them (tests/unit/test_dependency_lock.py)."; \
	  $(BIN)/pip freeze --all --exclude-editable | grep -v -i -E '^(setuptools|wheel)=='; } > $(LOCK)
	touch $(VENV)/.installed
	$(MAKE) test

check:
	@$(BIN)/python -m epochal check

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

# The documentation site (mkdocs.yml) into build/site; --strict: a broken link, a page left out of
# the nav or an unresolvable API reference fails it (tests/unit/test_docs_site.py builds it too).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python -m benchmarks.throughput

# epochal vs PyFlink, Spark Structured Streaming, Bytewax (installs each into .venv-peers/ on first use)
bench-peers: setup
	$(BIN)/python -m benchmarks.peers

clean:
	rm -rf $(VENV) .venv-peers build *.egg-info src/*.egg-info .pytest_cache benchmarks/results test-artifacts
