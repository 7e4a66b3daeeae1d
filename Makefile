# One entry point for set-up, running, tests and benchmarks.
# Every target creates or reuses .venv and installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 7071
TOOLS_VENV := .venv-tools
TOOLS_STAMP := $(TOOLS_VENV)/.installed

.PHONY: install tools run serve test lint format bench clean

install: $(STAMP)
	@$(BIN)/python -m shared.sqlite_limits >/dev/null  # the SQLite limits extension (no-op when built)

$(STAMP): requirements.txt requirements-dev.txt scripts/install-system-deps.sh
	@scripts/install-system-deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $(STAMP)

# checkov (Bicep checks in tests/infra) lives in its own venv: its pins clash with the app's.
tools: $(TOOLS_STAMP)

$(TOOLS_STAMP): requirements-tools.txt
	@test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	@$(TOOLS_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-tools.txt
	@touch $(TOOLS_STAMP)

# The main job on embedded defaults, on a host serving the app at :$(PORT) (kept running; Ctrl+C stops it).
QUESTION ?= Which region had the most returns in Q3, and what does the returns policy say about refunds after 30 days?
run: $(STAMP)
	$(BIN)/python -m devhost ask "$(QUESTION)" --url http://127.0.0.1:$(PORT) --keep-serving

serve: $(STAMP)
	$(BIN)/python -m devhost serve --port $(PORT)

test: $(STAMP) $(TOOLS_STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(TOOLS_VENV) .build .devhost .pytest_cache .mypy_cache .ruff_cache
