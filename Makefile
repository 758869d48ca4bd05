# One command per job. CI (.ci/run) calls the same targets a developer runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: up test install install-test generate check-protos lint format docs bench clean
.PHONY: ts-install ts-generate ts-check ts-test
.PHONY: go-install go-generate go-check
.PHONY: browser-install

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
test: install-test browser-install
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc
	$(MAKE) ts-test

## Regenerate the Python code from the protos.
generate: install-test
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/generate_protos.sh

## buf lint, buf breaking against the previous commit, and the generated-code drift check.
check-protos: install-test
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/check_protos.sh

## TypeScript client (clients/typescript): npm ci from the committed lock file, generation
## with buf and the local protoc-gen-es, the drift check, and the tests (which start their own
## `reachstore up` and talk to it over gRPC).
TS_DIR := clients/typescript

$(TS_DIR)/node_modules/.installed: $(TS_DIR)/package.json $(TS_DIR)/package-lock.json
	cd $(TS_DIR) && npm ci --no-audit --no-fund
	touch $@

ts-install: $(TS_DIR)/node_modules/.installed

ts-generate: install-test ts-install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/generate_ts.sh

ts-check: install-test ts-install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH scripts/check_ts.sh

ts-test: install ts-install
	cd $(TS_DIR) && npm test

## Go client (clients/go): Go 1.19, protoc-gen-go, protoc-gen-go-grpc and the Go libraries from
## Debian's packages (apt-get, only when missing), built in GOPATH mode without downloads.
## go-check fails on drift in the committed code, then builds and vets it and the example.
go-install:
	scripts/go_client.sh install

go-generate: install-test go-install
	scripts/go_client.sh generate

go-check: install-test go-install
	scripts/go_client.sh check

## The operator console's browser tests drive Debian's chromium through Playwright (a test
## tool's own browser download does not work here): apt-get installs it only when missing,
## refreshing the package lists only when the first attempt fails.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

browser-install:
	@if [ -x $(CHROMIUM) ]; then echo "chromium already installed"; else \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
	  || { echo "apt-get install failed; refreshing the package lists and trying again" >&2; \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; \
	fi

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
