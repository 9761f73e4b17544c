# dispatch — local development targets. `make` (or `make help`) lists them.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PGPORT   ?= 5432
SQS_PORT ?= 9324
export PGPORT SQS_PORT

BIN    := bin/dispatch
BENCH  := bin/dispatch-bench
DEVENV := localstack/devenv.sh

# Stamped into `dispatch version` by `make build` and `make image` (a
# release sets VERSION=v1.2.3); the variables live in the program's package.
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
APP_PKG    := github.com/dispatchhq/dispatch/cmd/dispatch/internal/app
LDFLAGS    := -X $(APP_PKG).version=$(VERSION) -X $(APP_PKG).commit=$(COMMIT) -X $(APP_PKG).date=$(BUILD_DATE)
# The service binary is built as the image builds it: static (no cgo, the
# pure-Go DNS resolver), without gin's MessagePack codec (nomsgpack), which
# dispatch never uses and which was a sixth of the binary's code, and
# without gRPC's /debug/requests pages (grpcnotrace; gRPC comes with the
# OTLP exporter), whose html/template made the linker keep every method;
# a smaller binary maps fewer pages (docs/benchmarks.md, "Resident memory").
GOBUILD    := CGO_ENABLED=0 go build -trimpath -tags nomsgpack,grpcnotrace

# Settings for `make run` / `make bench`; each can be overridden from the
# environment or the command line (make run DISPATCH_LOG_FORMAT=json).
DISPATCH_INSECURE              ?= true
DISPATCH_QUEUE_CREATE          ?= true
DISPATCH_ALLOW_PRIVATE_TARGETS ?= true
DISPATCH_LOG_FORMAT            ?= text

# make bench: throughput, fixed rate and batch ingest, each in every mode of
# BENCH_MODES (`all`, `split`); BENCH_ARGS goes to every run (-clients 16,
# -concurrency 100; see `./bin/dispatch-bench -h`).
BENCH_JOBS       ?= 5000
BENCH_RATE       ?= 200
BENCH_DURATION   ?= 10s
BENCH_BATCH_JOBS ?= 30000
BENCH_BATCH      ?= 100
BENCH_MODES    ?= all split
BENCH_ARGS     ?=
SOAK_JOBS    ?= 100000
SOAK_GROUPS  ?= 2000
SOAK_BACKLOG ?= 50000
FUZZTIME   ?= 30s
# The short fuzz run at the end of `make test`, per fuzz target.
TEST_FUZZTIME ?= 5s
# Packages with fuzz targets (the pointer, allowed targets and ordering keys;
# request decoding in api/decode, which imports no gin, pgx or store, so its
# instrumented test binary builds in seconds; signature verification).
FUZZ_PKGS  ?= . ./api/decode ./webhook

# golangci-lint, pinned; `make lint` installs it into .dev/tools from the Go
# module proxy the first time (go install, no other download).
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := .dev/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

# Exports the devenv variables (DATABASE_URL, AWS_*) into a recipe's shell.
DEV_ENV := eval "$$($(DEVENV) env)"
RUN_ENV := DISPATCH_INSECURE=$(DISPATCH_INSECURE) \
	DISPATCH_QUEUE_CREATE=$(DISPATCH_QUEUE_CREATE) \
	DISPATCH_ALLOW_PRIVATE_TARGETS=$(DISPATCH_ALLOW_PRIVATE_TARGETS) \
	DISPATCH_LOG_FORMAT=$(DISPATCH_LOG_FORMAT)
TEST_ENV := DISPATCH_TEST_SQS=http://127.0.0.1:$(SQS_PORT)

.PHONY: help build image up down browser run test test/short test/fuzz openapi/check lint bench soak fuzz compose/check clean distclean

help: ## List targets
	@echo "usage: make <target>   (PGPORT=$(PGPORT) SQS_PORT=$(SQS_PORT))"
	@grep -hE '^[a-zA-Z0-9_/.-]+:.*?## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*?## "}; {printf "  %-15s %s\n", $$1, $$2}'

build: ## Build bin/dispatch (version, commit and date stamped) and bin/dispatch-bench
	$(GOBUILD) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/dispatch
	go build -o $(BENCH) ./cmd/dispatch-bench

image: ## Build the container image dispatch:$(VERSION), stamped like `make build`
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(BUILD_DATE) -t dispatch:$(VERSION) .

up: ## Start PostgreSQL (if none answers) and the SQS stand-in (cmd/sqsfake)
	$(DEVENV) up

down: ## Stop what `make up` started (SQS stand-in, private PostgreSQL cluster)
	$(DEVENV) down

# The console's browser tests drive Debian's headless Chromium (no browser
# download: none is reachable here). Installed only when it is missing.
CHROMIUM ?= /usr/bin/chromium

browser: ## Install Debian's chromium for the console's browser tests, if missing
	@if [ -x "$(CHROMIUM)" ]; then echo "chromium: $$($(CHROMIUM) --version 2>/dev/null || echo present)"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		sudo_cmd=""; [ "$$(id -u)" -eq 0 ] || sudo_cmd="sudo"; \
		$$sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo_cmd apt-get install -y -qq chromium; \
	else echo "browser: install Chromium at $(CHROMIUM) (the console's browser tests need it)"; exit 1; fi

run: up build ## Run `dispatch all` against the local environment
	$(DEV_ENV); $(RUN_ENV) ./$(BIN) all

test: up browser ## go vet + full test suite with -race against PostgreSQL and the SQS stand-in, then test/fuzz
	go vet ./...
	@mkdir -p .dev && rm -f .dev/test-report.txt
	$(DEV_ENV); $(TEST_ENV) DISPATCH_TEST_REPORT=$(CURDIR)/.dev/test-report.txt go test -race -count=1 -timeout 15m ./...
	@echo "== chaos figures"; cat .dev/test-report.txt 2>/dev/null || true
	@$(MAKE) --no-print-directory openapi/check
	@$(MAKE) --no-print-directory test/fuzz

# api/openapi.json through independent tools, pinned in tools/openapi
# (package-lock.json; npm ci, nothing global): Redocly's linter with its
# recommended rules (warnings as errors, deliberate exceptions listed),
# swagger-parser, and a TypeScript client generated from it and type-checked.
OPENAPI_TOOLS := tools/openapi

openapi/check: $(OPENAPI_TOOLS)/node_modules/.package-lock.json ## Lint (Redocly) and validate (swagger-parser) api/openapi.json; type-check a generated TypeScript client
	cd $(OPENAPI_TOOLS) && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true npm run --silent check

$(OPENAPI_TOOLS)/node_modules/.package-lock.json: $(OPENAPI_TOOLS)/package.json $(OPENAPI_TOOLS)/package-lock.json
	cd $(OPENAPI_TOOLS) && npm ci --no-audit --no-fund --silent

soak: up ## The scale chaos test at full size (100,000 jobs, 2,000 groups) and a 50,000-job backlog; prints the figures
	@mkdir -p .dev && rm -f .dev/soak-report.txt
	$(DEV_ENV); $(TEST_ENV) DISPATCH_TEST_REPORT=$(CURDIR)/.dev/soak-report.txt \
		DISPATCH_TEST_SCALE_JOBS=$(SOAK_JOBS) DISPATCH_TEST_SCALE_GROUPS=$(SOAK_GROUPS) DISPATCH_TEST_BACKLOG_JOBS=$(SOAK_BACKLOG) \
		go test -count=1 -timeout 80m -run '^(TestScaleChaos|TestBacklogDrain)$$' ./cmd/dispatch/e2e
	@echo "== soak figures"; cat .dev/soak-report.txt

test/fuzz: ## Short fuzz run: each fuzz target in FUZZ_PKGS for TEST_FUZZTIME (5s)
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

test/short: up browser ## Like `test`, without -race
	go vet ./...
	$(DEV_ENV); $(TEST_ENV) go test -count=1 -timeout 15m ./...

lint: $(GOLANGCI_LINT) ## gofmt must report nothing; golangci-lint (.golangci.yml: vet, staticcheck, errcheck, revive, import rules)
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(@D)
	GOBIN=$(CURDIR)/$(@D) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(@D)/golangci-lint $@

bench: up build ## dispatch-bench: throughput (BENCH_JOBS), a fixed BENCH_RATE for BENCH_DURATION, and batch ingest (BENCH_BATCH_JOBS in batches of BENCH_BATCH), each in `all` and split (BENCH_MODES); the floor at the first two; then the Go benchmarks
	@$(DEV_ENV); for load in "-jobs $(BENCH_JOBS)" "-rate $(BENCH_RATE) -duration $(BENCH_DURATION)" "-jobs $(BENCH_BATCH_JOBS) -batch $(BENCH_BATCH)"; do \
		for mode in $(BENCH_MODES); do \
			case "$$mode" in all) split= ;; split) split=-split ;; *) echo "bench: BENCH_MODES: $$mode is neither all nor split" >&2; exit 2 ;; esac; \
			echo "== $$mode: $$load"; \
			$(RUN_ENV) ./$(BENCH) -dispatch ./$(BIN) $$load $$split $(BENCH_ARGS); \
		done; \
	done
	@$(DEV_ENV); for load in "-jobs $(BENCH_JOBS)" "-rate $(BENCH_RATE) -duration $(BENCH_DURATION)"; do \
		echo "== floor (the least a service of this shape costs here, no dispatch): $$load"; \
		$(RUN_ENV) ./$(BENCH) -floor $$load $(BENCH_ARGS); \
	done
	@echo "== Go benchmarks"
	@$(DEV_ENV); echo "PostgreSQL $$(psql "$$DATABASE_URL" -Atc 'SHOW server_version'): autovacuum $$(psql "$$DATABASE_URL" -Atc 'SHOW autovacuum') (production runs it on; table bytes per delivery are measured without it)"
	$(DEV_ENV); $(TEST_ENV) go test -run '^$$' -bench . -benchmem ./...

fuzz: ## Run each fuzz target in FUZZ_PKGS for FUZZTIME (30s), one at a time
	@if [ -z "$(strip $(FUZZ_PKGS))" ]; then echo "fuzz: FUZZ_PKGS is empty, nothing to do"; exit 0; fi; \
	for pkg in $(FUZZ_PKGS); do \
		list="$$(go test -list '^Fuzz' "$$pkg")"; \
		for fn in $$(grep '^Fuzz' <<<"$$list" || true); do \
			echo "== $$pkg $$fn"; \
			out="$$(mktemp)"; \
			if ! go test -run '^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) "$$pkg" 2>&1 | tee "$$out"; then \
				if grep -q 'Failing input written' "$$out" || ! grep -q 'context deadline exceeded' "$$out"; then rm -f "$$out"; exit 1; fi; \
				echo "== $$pkg $$fn: the fuzz engine timed out stopping its workers (no failing input); once more"; \
				go test -run '^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) "$$pkg" || { rm -f "$$out"; exit 1; }; \
			fi; \
			rm -f "$$out"; \
		done; \
	done

compose/check: ## Check docker-compose.yml: it parses, publishes on loopback, has what the README's compose section uses
	go test -count=1 -run '^(TestComposePublishesOnLoopbackOnly|TestREADMEComposeSectionMatchesComposeFile)$$' ./cmd/dispatch/e2e
	@if python3 -c 'import yaml' 2>/dev/null; then \
		python3 -c 'import yaml,sys; yaml.safe_load(open(sys.argv[1]))' docker-compose.yml && \
		echo "docker-compose.yml: valid YAML (PyYAML)"; \
	elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		docker compose config -q && echo "docker-compose.yml: valid (docker compose config)"; \
	else \
		echo "compose/check: skipped, neither PyYAML nor a docker engine is available"; \
	fi

clean: ## Remove build and test outputs
	rm -rf bin/ *.out *.test

distclean: clean down ## clean + stop services, remove .dev/
	rm -rf .dev/
