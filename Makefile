# qunfa — bulk message delivery. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
FUNCTIONS := $(notdir $(wildcard functions/*))
EMULATORS := tools/emulators/node_modules/.bin/dynalite

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the qunfa command and every Lambda bootstrap (linux/arm64)
	$(GO) build -o bin/qunfa ./cmd/qunfa
	@for f in $(FUNCTIONS); do \
	  echo "build functions/$$f"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -o bin/functions/$$f/bootstrap ./functions/$$f || exit 1; \
	done

.PHONY: run
run: ## Run the whole product locally with a demo campaign (no AWS, no Docker)
	$(GO) run ./cmd/qunfa dev --demo

.PHONY: emulators
emulators: $(EMULATORS) ## Install the npm AWS emulators used by the tests

$(EMULATORS): tools/emulators/package.json tools/emulators/package-lock.json
	cd tools/emulators && npm ci --no-audit --no-fund
	@touch $@

.PHONY: test
test: emulators ## Run all tests (starts the AWS emulators itself)
	$(GO) test -count=1 ./...

.PHONY: test-race
test-race: emulators ## Run all tests with the race detector
	$(GO) test -race -count=1 ./...

.PHONY: lint
lint: ## go vet and gofmt check
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: emulators ## Benchmarks: DynamoDB cost per message, pipeline throughput
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

.PHONY: clean
clean: ## Remove build output and local data
	rm -rf bin .qunfa
