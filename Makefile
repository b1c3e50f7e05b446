# qunfa — bulk message delivery. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
FUNCTIONS := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))
EMULATORS := tools/emulators/node_modules/.bin/dynalite
OPENAPI_TS := tools/openapi-ts/node_modules/.bin/openapi-typescript
# The typed Go client's generator, pinned in its own module (tools/oapi-codegen).
OAPI_CODEGEN := $(GO) tool -modfile=tools/oapi-codegen/go.mod oapi-codegen
# The oldest oapi-codegen the OpenAPI 3.0 rendering must satisfy (check-generators).
OAPI_CODEGEN_OLDEST := v2.5.0

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the qunfa command and every Lambda bootstrap (linux/arm64)
	$(GO) build -o bin/qunfa ./cmd/qunfa
	@for f in $(FUNCTIONS); do \
	  $(MAKE) --no-print-directory bootstrap FUNCTION=$$f OUT=bin/functions/$$f/bootstrap || exit 1; \
	done

# bootstrap builds one Lambda function (FUNCTION, a directory of functions/)
# into OUT: the one recipe `make build` and `sam build` (functions/lambda.mk)
# both use.
.PHONY: bootstrap
bootstrap:
	@test -n "$(FUNCTION)" -a -n "$(OUT)" || { echo "usage: make bootstrap FUNCTION=name OUT=path" >&2; exit 2; }
	@echo "build functions/$(FUNCTION)"
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -o $(OUT) ./functions/$(FUNCTION)

.PHONY: run
run: ## Run the whole product locally with a demo campaign (no AWS, no Docker)
	$(GO) run ./cmd/qunfa dev --demo

.PHONY: emulators
emulators: $(EMULATORS) ## Install the npm AWS emulators used by the tests

$(EMULATORS): tools/emulators/package.json tools/emulators/package-lock.json
	cd tools/emulators && npm ci --no-audit --no-fund
	@touch $@

.PHONY: openapi-ts
openapi-ts: $(OPENAPI_TS) ## Install openapi-typescript, which a test runs on the OpenAPI description

$(OPENAPI_TS): tools/openapi-ts/package.json tools/openapi-ts/package-lock.json
	cd tools/openapi-ts && npm ci --no-audit --no-fund
	@touch $@

.PHONY: generate
generate: ## Regenerate the typed Go client (apiclient/) from internal/api/openapi.json
	$(OAPI_CODEGEN) -config tools/oapi-codegen/apiclient.yaml internal/api/openapi.json

.PHONY: check-generate
check-generate: generate ## Fail when the checked-in generated code is stale
	@git diff --exit-code --stat -- apiclient/ || { echo "apiclient/ is stale: run make generate and commit it" >&2; exit 1; }

.PHONY: check-generators
check-generators: ## Generate clients with the oldest supported oapi-codegen (from the 3.0 rendering) and the pinned one (from both)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(GO) run ./cmd/qunfa openapi --version 3.0 > $$tmp/openapi-3.0.json; \
	$(GO) run ./cmd/qunfa openapi --version 3.1 > $$tmp/openapi-3.1.json; \
	echo "oapi-codegen $(OAPI_CODEGEN_OLDEST) on the 3.0 rendering"; \
	$(GO) run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_OLDEST) -generate types,client -package c -o $$tmp/oldest.go $$tmp/openapi-3.0.json; \
	for v in 3.0 3.1; do echo "oapi-codegen (pinned) on the $$v description"; \
	  $(OAPI_CODEGEN) -generate types,client -package c -o $$tmp/pinned-$$v.go $$tmp/openapi-$$v.json; done; \
	grep -q 'PauseReason \*PauseReason' $$tmp/oldest.go || { echo "$(OAPI_CODEGEN_OLDEST): Job.PauseReason is not *PauseReason" >&2; exit 1; }

.PHONY: test
test: emulators openapi-ts ## Run all tests (starts the AWS emulators itself)
	$(GO) test -count=1 ./...

# Every process-level test (./e2e) on `qunfa dev --backend aws --emulators`:
# DynamoDB and SQS FIFO adapters on dynalite and fauxqs. `make test` runs
# the kill/restart and rate tests there already (TestKillAndRestartAWS,
# TestRatesAWS); CI (.ci/run) runs this target too.
.PHONY: test-aws
test-aws: emulators ## Run every process-level test (e2e) on qunfa dev --backend aws --emulators
	QUNFA_E2E_BACKEND=aws $(GO) test -count=1 -timeout 30m ./e2e/

# The chaos suite (docs/operations.md, "The chaos suite"): CHAOS_RUNS
# randomized seeded runs of the whole pipeline under faults on SQLite (a
# random first seed, printed; QUNFA_CHAOS_BASE=<n> repeats a batch,
# QUNFA_CHAOS_SEED=<n> one run), CHAOS_DYNAMODB_RUNS on DynamoDB (dynalite)
# and SQS (fauxqs), then the 20-kill process test. `make test` runs a short
# version (40 runs on SQLite, 6 on the emulators).
CHAOS_RUNS ?= 500
CHAOS_DYNAMODB_RUNS ?= 100

.PHONY: chaos
chaos: emulators ## Chaos suite: 500 randomized seeded runs under faults on SQLite, 100 on DynamoDB + SQS emulators, then qunfa dev killed 20 times
	QUNFA_CHAOS_RUNS=$(CHAOS_RUNS) $(GO) test -count=1 -timeout 30m -run 'TestChaos$$' ./internal/chaos/
	QUNFA_CHAOS_RUNS=$(CHAOS_DYNAMODB_RUNS) $(GO) test -count=1 -timeout 30m -run 'TestChaosDynamoDB$$' ./internal/chaos/
	$(GO) test -count=1 -timeout 10m -run 'TestChaosKills$$' -v ./e2e/

.PHONY: test-race
# ./e2e and ./e2e/browser are left out: they run qunfa as child processes
# built without -race (it would slow them below the rates they judge), so
# under -race they would only be the process-level suite once more, with
# nothing of qunfa's own code watched (make test runs them; make test-aws
# runs ./e2e on the aws backend).
test-race: emulators openapi-ts ## Run the tests of every package but the process-level ones (e2e) with the race detector
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/e2e\(/browser\)\?$$')

# Coverage of internal/ by the tests that run its code in their own process.
# ./e2e is left out: it runs qunfa as child processes built without -cover,
# so under coverage it would only be the same process-level suite once more
# (make test runs it already; make test-aws runs it on the aws backend).
.PHONY: test-cover
test-cover: emulators openapi-ts ## Run the tests of every package but e2e with coverage of internal/ (slower: flushes out timing-dependent tests)
	set -o pipefail; $(GO) test -count=1 -coverpkg=./internal/... -coverprofile=coverage.out $$($(GO) list ./... | grep -v '/e2e$$') | grep -v 'coverage: 0.0%'
	@$(GO) tool cover -func=coverage.out | tail -1

# Every native fuzz target: package and name. `make test` runs their seed
# corpora (and any committed testdata/fuzz crashers) as ordinary tests.
FUZZ_TARGETS := \
  ./internal/api:FuzzSubmitBody ./internal/api:FuzzRoutes \
  ./internal/submit:FuzzParsePart ./internal/content:FuzzTemplate \
  ./internal/provider/wecomapi:FuzzAnswers ./internal/campaign:FuzzSchedule \
  ./internal/store/sqlitestore:FuzzCursors ./internal/store/sqlitestore:FuzzRunBody \
  ./internal/store/dynamostore:FuzzCursor \
  ./internal/mockprovider:FuzzSendText
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s); crashers land in testdata/fuzz/ (commit them with the fix)
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; done

# MUTATE: targets of tools/mutate/mutate.sh (default: all six, one after
# another, one gremlins worker, niced). Not part of `make test`.
MUTATE ?=

.PHONY: mutate
mutate: emulators ## Mutation testing (gremlins) of breaker, control, reconcile, sender and the stores' item code: make mutate [MUTATE="breaker control"]
	tools/mutate/mutate.sh $(MUTATE)

.PHONY: lint
lint: ## go vet and gofmt check
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: emulators ## Benchmarks: DynamoDB cost per message, pipeline throughput, end-to-end msg/s
	$(GO) test -run '^$$' -bench . -benchtime 1x $$($(GO) list ./... | grep -v '/e2e$$')
	@# Alone, so no other package's benchmark competes for the CPU.
	$(GO) test -run '^$$' -bench . -benchtime 1x ./e2e/

# ------------------------------------------------------------------ AWS (SAM)
# docs/deploy.md explains these. They need the sam CLI (and, for LocalStack,
# a running LocalStack); no test runs them.
STAGE           ?= dev
PROVIDER_URL    ?=
PROVIDER_SECRET ?= qunfa/$(STAGE)/provider
ALARM_EMAIL     ?=
LOCALSTACK_URL  ?= http://localhost:4566

.PHONY: sam-build
sam-build: ## Build every function with sam build (functions/*/Makefile, linux/arm64)
	sam validate --lint
	sam build --config-env $(STAGE)

.PHONY: deploy
deploy: ## Deploy to AWS: make deploy STAGE=dev|prod PROVIDER_URL=https://... [PROVIDER_SECRET=name] [ALARM_EMAIL=addr] [EXTRA_PARAMS="K=V ..."]
	@case "$(PROVIDER_URL)" in http://?*|https://?*) ;; \
	  *) echo "make deploy needs PROVIDER_URL, the wecomapi provider's base URL: make deploy STAGE=$(STAGE) PROVIDER_URL=https://wecom-gateway.example.com" >&2; exit 2;; esac
	$(MAKE) --no-print-directory sam-build STAGE=$(STAGE)
	sam deploy --config-env $(STAGE) --parameter-overrides \
	  "Stage=$(STAGE)" "ProviderURL=$(PROVIDER_URL)" "ProviderSecretName=$(PROVIDER_SECRET)" \
	  $(if $(ALARM_EMAIL),"AlarmEmail=$(ALARM_EMAIL)") $(EXTRA_PARAMS)

.PHONY: localstack-deploy
localstack-deploy: sam-build ## Deploy the stack to LocalStack at LOCALSTACK_URL (PROVIDER_URL defaults to a local mock)
	AWS_ENDPOINT_URL=$(LOCALSTACK_URL) AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
	  aws secretsmanager create-secret --name qunfa/local/provider --secret-string '{"token":"local"}' >/dev/null 2>&1 || true
	AWS_ENDPOINT_URL=$(LOCALSTACK_URL) AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
	  sam deploy --stack-name qunfa-local --resolve-s3 --capabilities CAPABILITY_IAM --no-confirm-changeset \
	  --no-fail-on-empty-changeset --parameter-overrides "Stage=dev" \
	  "ProviderURL=$(or $(PROVIDER_URL),http://host.docker.internal:8081)" "ProviderSecretName=qunfa/local/provider"

.PHONY: localstack-test
localstack-test: ## Run the AWS adapter and Lambda handler tests against LocalStack's DynamoDB and SQS
	QUNFA_TEST_DYNAMODB_ENDPOINT=$(LOCALSTACK_URL) QUNFA_TEST_SQS_ENDPOINT=$(LOCALSTACK_URL) QUNFA_REQUIRE_EMULATORS=1 \
	  $(GO) test -count=1 ./internal/awsrun/ ./internal/store/dynamostore/ ./internal/queue/sqsqueue/

.PHONY: clean
clean: ## Remove build output and local data
	rm -rf bin .qunfa
