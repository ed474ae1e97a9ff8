# Lattice build. `make test` is what CI runs (.ci/run); `make lab` runs the
# emulation lab on the default topology.
GO       ?= go
EDITION  ?= community
TAGS     := $(if $(filter pro,$(EDITION)),pro,)
BIN      ?= bin
# The suite must finish well inside CI's 90 minutes on 2 cores.
TEST_TIMEOUT ?= 30m
FUZZTIME ?= 30s

.PHONY: all build test test-community test-pro lint bench fuzz deps runsc lab clean help scenarios

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build the binaries into bin/ (EDITION=pro for the Pro edition)
	$(GO) build -tags '$(TAGS)' -o $(BIN)/ ./cmd/...
	@# lattice-sandbox static, as in the image: an idle sandbox maps no libc.
	CGO_ENABLED=0 $(GO) build -tags '$(TAGS)' -o $(BIN)/ ./cmd/lattice-sandbox

deps: ## install what the tests need when missing (tshark, ping, ip, nsenter, iptables, curl, wg, chromium: scripts/deps.sh)
	@scripts/deps.sh

test: deps runsc lint test-community test-pro ## vet, lint and test both editions

# Virtual time (docs/VIRTUAL_TIME.md): with the flags scripts/vtime-flags.sh
# prints, go test ./scenarios/... runs every scenario that can in a
# testing/synctest bubble, and TestScenariosRealTime runs five of them on the
# wall clock as well.
test-community:
	flags=$$(scripts/vtime-flags.sh) && $(GO) test $$flags -race -timeout $(TEST_TIMEOUT) ./...
	@# The race detector slows the end-to-end mesh tests about tenfold, so
	@# under it they move less data; here they run again at full size.
	$(GO) test -count=1 -timeout 15m -run 'TestDirectCutMidTransfer|TestPathMatrix|TestRestartFirstExchange|TestShortDeadAfterStaysDirect' ./node/

# The Pro edition differs only in the packages that ask internal/edition;
# their tests run again with the tag (the rest is the same code).
# ./scenarios holds the Pro-only scenario files (egress policy, forwards).
PRO_PKGS = $(shell $(GO) list -tags pro -f '{{.ImportPath}} {{join .Imports " "}} {{join .XTestImports " "}}' ./... | awk '/internal\/edition/ {print $$1}') ./scenarios/...

test-pro:
	$(GO) build -tags pro ./...
	$(GO) vet -tags pro ./...
	flags=$$(scripts/vtime-flags.sh) && $(GO) test $$flags -race -tags pro -timeout $(TEST_TIMEOUT) $(PRO_PKGS)

scenarios: ## run every scenario file, in virtual time where it can (the rest, and five more, on the wall clock)
	flags=$$(scripts/vtime-flags.sh) && $(GO) test $$flags -count=1 -tags '$(TAGS)' -timeout $(TEST_TIMEOUT) ./scenarios/...

.PHONY: soak

soak: ## run scenarios/soak/ (20 nodes with churn, the 1-hour soak, 200 lazy nodes with churn) in virtual time, one at a time, without -race
	flags=$$(scripts/vtime-flags.sh) && $(GO) test $$flags -count=1 -tags '$(TAGS)' -timeout 30m -run '^TestSoak$$' -v ./scenarios/ -args -soak

# runsc for gvisor mode, built from the gVisor version go.mod pins, statically
# (a dynamically linked runsc fails inside its own chroot), with its seccomp
# filters precompiled as gVisor's release builds have them: a `go install`ed
# runsc compiles them at each sandbox start. scripts/runsc.sh rebuilds a
# GOPATH/bin/runsc that is not its build of the pinned version.
runsc: ## build runsc (static, precompiled seccomp filters) into GOPATH/bin unless it is there
	@GO=$(GO) scripts/runsc.sh

lint: ## gofmt, go vet (also for macOS; Windows builds), golangci-lint (.golangci.yml, both editions: scripts/lint.sh)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags pro ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) build ./...
	@GO=$(GO) scripts/lint.sh

bench: ## run the benchmarks the issues name (figures via b.ReportMetric)
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

fuzz: ## run every fuzz target for FUZZTIME each
	@scripts/fuzz.sh $(FUZZTIME)

lab: ## run lattice-lab on the default topology
	$(GO) run ./cmd/lattice-lab run

clean:
	rm -rf $(BIN)

# The container image: FROM scratch, the static binaries, user nobody.
# They go to bin/image/ whatever BIN says: the Dockerfile and .dockerignore
# name that path. /lattice sandbox runs /lattice-sandbox beside it.
IMAGE ?= lattice:dev$(if $(filter pro,$(EDITION)),-pro,)
# The e2e suite builds its own image (Pro) and runs in about a minute, plus
# up to four minutes to compile the static binary on a cold build cache.
E2E_TIMEOUT ?= 15m

.PHONY: image test-e2e

image: ## build the FROM-scratch image lattice:dev (EDITION=pro: lattice:dev-pro)
	mkdir -p bin/image/var
	CGO_ENABLED=0 $(GO) build -tags '$(TAGS)' -trimpath -ldflags '-s -w' -o bin/image/ ./cmd/lattice ./cmd/lattice-sandbox
	docker build --build-arg EDITION=$(EDITION) -t $(IMAGE) .

test-e2e: ## run the image in real containers (test/; skips without a Docker engine)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/...

# Virtual time (docs/VIRTUAL_TIME.md). scripts/vtime-flags.sh prints the go
# flags (-modfile, -overlay) under which gVisor's sleepers park durably, so a
# testing/synctest bubble holding gVisor stacks advances its clock; a bare go
# test lacks them and lab/vtime's tests say so. vtime-check fails unless this
# build gets virtual time (-vtime.require turns the skip into a failure).
.PHONY: vtime-check

vtime-check: ## check that gVisor stacks run on virtual time with the flags scripts/vtime-flags.sh prints
	flags=$$(scripts/vtime-flags.sh) && $(GO) test -count=1 $$flags ./lab/vtime/ -args -vtime.require
