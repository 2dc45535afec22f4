# Two entry points matter: `make demo` and `make test` (see README); `make quick` is the
# fast lane for people working on the code.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test quick lint typecheck pytest protos reference bench clean dist

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nomad-device-launcher demo

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The fast lane: everything but the Go interop, the Debian and qemu nodes, the bundle
# builds, the QEMU kernel tier and the tests that start whole programs (ready-made plugins,
# the launcher, the conformance suite), which tests/conftest.py marks by what they use;
# side by side, as most of the time goes in waiting on plugins (docs/testing.md).
QUICK_SKIP    := interop or node or bundle or kernel or slow
QUICK_WORKERS ?= 4

quick: lint typecheck
	$(BIN)/pytest -q -n $(QUICK_WORKERS) -m "not ($(QUICK_SKIP))" $(PYTEST_ARGS)

# One executable file per ready-made plugin (every nomad-device-* script under
# nomad_device.plugins) and CPU, to copy into a Nomad client's plugin_dir: each
# brings CPython (built once per CPU, then cached) and uses the node's CPython
# 3.11-3.13 where it has one (docs/deploy.md).
dist: $(STAMP)
	$(BIN)/nomad-device-bundle --ready-made --interpreter auto --machine x86_64 --output-dir dist/x86_64
	$(BIN)/nomad-device-bundle --ready-made --interpreter auto --machine aarch64 --output-dir dist/aarch64

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

# docs/reference/ from the docstrings (tests/test_reference.py fails when it is stale).
reference: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
