# Two entry points matter: `make demo` and `make test` (see README).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest protos reference bench clean dist

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

# One executable file per ready-made plugin (every nomad-device-* script under
# nomad_device.plugins), to copy into a Nomad client's plugin_dir: docs/deploy.md.
dist: $(STAMP)
	$(BIN)/nomad-device-bundle --ready-made --output-dir dist

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

# docs/reference/ from the docstrings (tests/test_reference.py fails when it is stale).
reference: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
