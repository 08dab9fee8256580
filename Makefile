# The only commands anyone needs. Everything runs inside .venv, which these targets create.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv test test-fast lint fmt bench demo clean

help:
	@echo "make demo   run scheduler + worker + demo schedules (embedded server unless RSCHED_REDIS_URL is set)"
	@echo "make test   run the whole test suite against private redis-server / valkey processes"
	@echo "make lint   ruff + mypy --strict"
	@echo "make bench  run the benchmarks in bench/ and print their tables"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

demo: $(STAMP)
	$(BIN)/python -m rsched.demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
