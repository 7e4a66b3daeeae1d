# One entry point for set-up, running, tests and benchmarks.
# Every target creates or reuses .venv and installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 7071

.PHONY: install run serve test lint format bench clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt scripts/install-system-deps.sh
	@scripts/install-system-deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m devhost serve --port $(PORT)

serve: run

test: $(STAMP)
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
	rm -rf $(VENV) .devhost .pytest_cache .mypy_cache .ruff_cache
