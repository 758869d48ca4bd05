# One command per job. CI (.ci/run) calls the same targets a developer runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: up test install install-test generate check-protos lint format docs bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

## Install and start the whole system (Ctrl-C stops it).
up: install
	$(VENV)/bin/reachstore up $(UP_ARGS)

## Install what the tests need and run the whole suite. pytest's exit 5 (no test
## collected) counts as a failure.
test: install-test
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

## Regenerate the Python code from the protos.
generate: install-test
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/generate_protos.sh

## buf lint, buf breaking against the previous commit, and the generated-code drift check.
check-protos: install-test
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/check_protos.sh

## Lint, format check (ruff) and type check (mypy); `make format` rewrites.
lint: install-test
	$(VENV)/bin/ruff check services clients tests bench
	$(VENV)/bin/ruff format --check services clients tests bench
	$(VENV)/bin/mypy services clients/python/reachstore

format: install-test
	$(VENV)/bin/ruff check --fix services clients tests bench
	$(VENV)/bin/ruff format services clients tests bench

## Regenerate docs/ERRORS.md from the error catalogue.
docs: install
	$(PY) -m services.common.errors > docs/ERRORS.md

## Query and ingest benchmark on the shared corpus (prints ratios; not a test).
bench: install-test
	$(PY) bench/bench_storage.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
