# Two commands: `make demo` and `make test`. Each creates .venv with the machine's python3 when absent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PY_DIRS := zerobus_orchestration dagster_defs airflow_provider tests benchmarks examples tools
# The official SDK tunnels even 127.0.0.1 through *_proxy variables; keep loopback direct.
LOOPBACK_ENV := env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u grpc_proxy -u GRPC_PROXY \
	NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost no_grpc_proxy=127.0.0.1,localhost

.PHONY: venv demo test test-fast lint typecheck pytest docs docs-check bench bench-report proto clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[all]"
	$(BIN)/python -m pip check
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(LOOPBACK_ENV) $(BIN)/zerobus-orch demo $(DEMO_ARGS)

lint: $(STAMP) docs-check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check --quiet $(PY_DIRS)
	$(BIN)/lint-imports --no-logo  # the layering contracts in .importlinter

# mypy's parallel checking (-n, mypy 2): a cold check of the 231 modules (and the ~4,000 of dagster, airflow,
# databricks-sdk, ... they import) took 62.9 s serial and 38.5 s on 2 workers on this 2-core machine; a warm
# one 2.7 s either way. MYPY_WORKERS=0 for the serial check.
MYPY_WORKERS ?= 2
typecheck: $(STAMP)
	$(BIN)/mypy -n $(MYPY_WORKERS) zerobus_orchestration dagster_defs airflow_provider benchmarks tools

# `make pytest` is serial unless WORKERS is given (`make pytest WORKERS=2 PYTEST_ARGS=...`): one file on a
# shared machine should not take every core. `make test` and `make test-fast` run on TEST_WORKERS workers
# (pytest-xdist; `auto` is 2 workers a core, see tests/conftest.py: much of the suite's time is tests
# waiting). `--dist load --maxschedchunk 1` hands tests out one at a time as workers free up, in
# the order tests/conftest.py puts them (process-starting tests first), so every worker starts on a long
# test and the run ends on short ones. Both print the slowest tests, so a new slow test shows in the CI log.
TEST_WORKERS ?= auto
XDIST = $(if $(WORKERS),-n $(WORKERS) --dist load --maxschedchunk 1)
# Test runs write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE=1): otherwise
# each worker's collection and each of the hundreds of interpreters the tests start (CLI commands,
# daemons, hosts) compiles the project's modules from source again; collecting the suite took 18 CPU
# seconds instead of 11. __pycache__ is ignored by git and left out of the wheel.
TEST_ENV := $(LOOPBACK_ENV) PYTHONDONTWRITEBYTECODE=
pytest: $(STAMP)
	$(TEST_ENV) $(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

test: WORKERS ?= $(TEST_WORKERS)
test: PYTEST_ARGS += --durations=25
test: lint typecheck pytest

# The edit loop: lint, types, unit and integration tests, without the tests marked slow (tests/README.md).
test-fast: lint typecheck
	$(TEST_ENV) $(BIN)/pytest -n $(or $(WORKERS),$(TEST_WORKERS)) --dist load --maxschedchunk 1 -m "not slow" \
		--durations=10 $(PYTEST_ARGS) tests/unit tests/integration

# The site (mkdocs.yml) into .site/: --strict fails on a broken link or anchor, README.md included. The
# generated parts of docs/ (settings from config.py's field descriptions, the CLI from its parser, the
# public API from docs/public-api.txt) are rewritten by `docs` and checked by `docs-check` (part of lint).
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
docs: $(STAMP)
	$(BIN)/python tools/docs_reference.py
	$(MKDOCS)

docs-check: $(STAMP)
	$(BIN)/python tools/docs_reference.py --check
	$(MKDOCS)

bench: $(STAMP)
	$(LOOPBACK_ENV) $(BIN)/python benchmarks/pipelining.py

# docs/performance.md and its figures from fresh runs (small sizes: a few minutes; BENCH_REPORT_ARGS=--full
# for the 5 GB memory runs, --render-only to re-render from docs/performance/*.json).
bench-report: $(STAMP)
	$(LOOPBACK_ENV) $(BIN)/python benchmarks/report.py $(BENCH_REPORT_ARGS)

# Regenerate the committed gRPC modules of the local Zerobus emulator from their .proto sources.
PROTO_DIR := zerobus_orchestration/emulator/proto
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. \
		$(PROTO_DIR)/zerobus_service.proto $(PROTO_DIR)/flight.proto

clean:
	rm -rf $(VENV) .site .zerobus .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
