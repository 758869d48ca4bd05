# One command per job. CI (.ci/run) calls the same targets a developer runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Test processes of the parallel pass (docs/OPERATIONS.md, "Test suite"): one per core.
# Four on two cores was faster still, but starved tests with sub-second budgets.
TEST_WORKERS ?= 2
PIP    := $(VENV)/bin/pip

.PHONY: up test install install-test lock wheels generate check-protos lint format docs bench bench-peers clean
.PHONY: ts-install ts-generate ts-check ts-test
.PHONY: go-install go-generate go-check
.PHONY: browser-install faults-install faults

# Third-party packages come only from the lock files, every file checked against its hash;
# the two local distributions (the SDK in clients/python, the server here) follow with
# --no-deps, so nothing outside the lock is resolved. `make lock` rewrites the lock files.
LOCAL_PACKAGES := -e ./clients/python -e .

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml requirements/server.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet --require-hashes -r requirements/server.txt
	$(PIP) install --quiet --no-deps $(LOCAL_PACKAGES)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements/test.txt
	$(PIP) install --quiet --require-hashes -r requirements/test.txt
	$(PIP) install --quiet --no-deps $(LOCAL_PACKAGES)
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

## Re-resolve both lock files from pyproject.toml and clients/python/pyproject.toml (needs the
## package index). The test lock is resolved first and constrains the server's, so a package
## in both has one version. UV_LOCK_ARGS="--upgrade" moves every package to its newest release.
UV_COMPILE := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--no-emit-package reachstore --no-emit-package reachstore-server $(UV_LOCK_ARGS)

lock: install-test
	$(UV_COMPILE) requirements/test.in -o requirements/test.txt
	$(UV_COMPILE) -c requirements/test.txt requirements/server.in -o requirements/server.txt

## The two distributions, SDK and server, into dist/: each wheel is built from its sdist, so
## nothing left in a build/ folder from an earlier layout of the tree can slip into it.
wheels: install-test
	rm -rf dist
	$(PY) -m build --outdir dist clients/python
	$(PY) -m build --outdir dist .

## Install and start the whole system (Ctrl-C stops it).
up: install
	$(VENV)/bin/reachstore up $(UP_ARGS)

## Install what the tests need and run the whole suite. pytest's exit 5 (no test
## collected) counts as a failure.
test: install-test browser-install faults-install go-install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" $(PYTEST_ARGS); a=$$?; \
	$(PY) -m pytest -m alone $(PYTEST_ARGS); b=$$?; \
	for rc in $$a $$b; do \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; \
	  if [ $$rc -ne 0 ]; then exit $$rc; fi; \
	done
	$(MAKE) ts-test

## Regenerate the Python code and the bridge's descriptor set (with comments) from the protos.
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

# $(call apt_install_missing,<package>,<file it installs>): apt-get installs a Debian package
# only when the file is missing, refreshing the package lists only when the first attempt fails.
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
define apt_install_missing
	@if [ -x $(2) ]; then echo "$(1) already installed"; else \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1) >/dev/null \
	  || { echo "apt-get install failed; refreshing the package lists and trying again" >&2; \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1) >/dev/null; }; \
	fi
endef

## The operator console's browser tests drive Debian's chromium through Playwright (a test
## tool's own browser download does not work here).
CHROMIUM := /usr/bin/chromium

browser-install:
	$(call apt_install_missing,chromium,$(CHROMIUM))

## The fault checker runs a reach worker with a skewed clock through Debian's libfaketime
## (package faketime).
FAKETIME := /usr/bin/faketime

faults-install:
	$(call apt_install_missing,faketime,$(FAKETIME))

## The long fault-checker run, by hand (several minutes): FAULTS_ACTIONS actions under every
## fault at once, on SQLite and on PostgreSQL; prints the counts and every property broken.
## FAULTS_SEED repeats a run; the other FAULTS_* settings are in tests/faults/checker.py.
FAULTS_ACTIONS ?= 2000

faults: install-test faults-install
	FAULTS_ACTIONS=$(FAULTS_ACTIONS) $(PY) -m tests.faults.checker $(FAULTS_ARGS)

## Lint, format check (ruff), type check (mypy) and the layering contracts of ARCHITECTURE.md
## (import-linter, from pyproject.toml); `make format` rewrites.
lint: install-test
	$(VENV)/bin/ruff check reachstore_server clients tests bench
	$(VENV)/bin/ruff format --check reachstore_server clients tests bench
	$(VENV)/bin/mypy reachstore_server clients/python/reachstore
	$(VENV)/bin/lint-imports --no-cache

format: install-test
	$(VENV)/bin/ruff check --fix reachstore_server clients tests bench
	$(VENV)/bin/ruff format reachstore_server clients tests bench

## Regenerate docs/ERRORS.md from the error catalogue.
docs: install
	$(PY) -m reachstore_server.common.errors > docs/ERRORS.md

## Query and ingest benchmark on the shared corpus (prints ratios; not a test).
bench: install-test
	$(PY) bench/bench_storage.py $(BENCH_ARGS)

## The peer table in one sitting: starts its own system, ingests the shared corpus as
## shipped, runs ../shared/peerbench/peers.sh against it and prints ratios to the raw limit
## and to Qdrant Edge measured in the same run (not a test).
bench-peers: install-test
	$(PY) bench/bench_peers.py $(BENCH_PEERS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache dist
