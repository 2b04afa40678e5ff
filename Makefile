# Thin targets over the `datamask` CLI. `make demo` and `make test` set everything up on a fresh
# machine: a virtualenv in .venv with the pinned requirements and this package installed editable.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.PHONY: install demo test bench bench-baselines clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

demo: install
	$(BIN)/datamask demo --workdir runs/demo

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m datamask.bench

bench-baselines: install
	$(BIN)/python -m baselines.bench

clean:
	rm -rf runs build *.egg-info
