# Two commands: `make demo` and `make test`. Each creates .venv with the machine's python3 when absent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PY_DIRS := zerobus_orchestration dagster_defs airflow_provider tests benchmarks examples tools
# The official SDK tunnels even 127.0.0.1 through *_proxy variables; keep loopback direct.
LOOPBACK_ENV := env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u grpc_proxy -u GRPC_PROXY \
	NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost no_grpc_proxy=127.0.0.1,localhost

.PHONY: venv demo test lint typecheck pytest docs docs-check bench bench-report proto clean

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

typecheck: $(STAMP)
	$(BIN)/mypy zerobus_orchestration dagster_defs airflow_provider benchmarks tools

pytest: $(STAMP)
	$(LOOPBACK_ENV) $(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck pytest

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
