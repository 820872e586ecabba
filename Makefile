# The only commands a newcomer needs. Each target creates or updates .venv by itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS ?= test,dev

.PHONY: demo test lint format venv bench soak proto clean

$(STAMP): pyproject.toml scripts/preflight.sh
	@PYTHON=$(PYTHON) scripts/preflight.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

venv: $(STAMP)

## The main job. Until the node and SDK land, it runs the storage benchmark.
demo: $(STAMP)
	$(PY) -m bench.storage

## The test suite CI runs (under 15 minutes on 2 cores).
test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) -m bench.storage

## Regenerate proto/*_pb2*.py from proto/*.proto (a test fails when they are stale).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. --pyi_out=. proto/*.proto

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
