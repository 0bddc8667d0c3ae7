# One command to run, one to test. Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck migrate worker openapi browser bench bench-jobs bench-mcp bench-money bench-directory bench-console bench-tools clean install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# `make run PORT=8500` serves elsewhere; the base URL (links in mail, claim URLs, the trusted origin) follows
# unless CALLBOARD_BASE_URL is set.
PORT ?= 8000
run: $(STAMP)
	CALLBOARD_BASE_URL="$${CALLBOARD_BASE_URL:-http://127.0.0.1:$(PORT)}" $(BIN)/callboard serve --host 127.0.0.1 --port $(PORT)

migrate: $(STAMP)
	$(BIN)/callboard migrate

worker: $(STAMP)
	$(BIN)/callboard worker

# One test process per CPU (at most 4): each has its own SQLite file and PostgreSQL database.
test: $(STAMP)
	$(BIN)/pytest -q -n auto --maxprocesses=4

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

openapi: $(STAMP)
	$(BIN)/python -m http_api openapi

# Debian's Chromium for the console's browser tests (Playwright drives it; no browser download). Installed
# when missing, as root or with sudo; without it those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (Debian package) for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; \
	}

# The load generator the HTTP benchmarks drive: Debian's wrk, installed when missing (as root, or with sudo).
bench-tools:
	@command -v wrk >/dev/null 2>&1 || { \
		echo "installing wrk (Debian package) for the benchmarks"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq wrk; \
	}

# Reads and the write floor on SQLite, then PostgreSQL when reachable (a throwaway database created through
# BENCH_POSTGRES_URL), then the money benchmark on both; last, every target in one table (bench/summary.md).
BENCH_POSTGRES_URL ?= postgresql+asyncpg://root@127.0.0.1:5432/test

bench: $(STAMP) bench-tools
	$(BIN)/python bench/run.py
	$(BIN)/python bench/run.py --database-url $(BENCH_POSTGRES_URL) --output bench/results_postgres.md \
		|| echo "bench: PostgreSQL run skipped or failed (see above)"
	$(BIN)/python bench/money.py || echo "bench: the money benchmark failed (see above)"
	$(BIN)/python bench/summary.py

bench-jobs: $(STAMP) bench-tools
	$(BIN)/python bench/jobs.py

bench-mcp: $(STAMP)
	$(BIN)/python bench/mcp_tool.py

bench-money: $(STAMP)
	$(BIN)/python bench/money.py

bench-directory: $(STAMP)
	$(BIN)/python bench/directory.py

bench-console: $(STAMP)
	$(BIN)/python bench/console.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
