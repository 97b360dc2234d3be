# dispatch — see README.md.
GO       ?= go
BIN      := bin/dispatch
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
VERSION  := $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The wrapper version changes whenever its source does, so nodes get the new one:
# its source is every non-test Go file of this module's packages the wrapper
# builds from, on every node platform (wrapper-inputs lists them), and go.mod/go.sum.
WRAPPER_DIRS := $(sort $(foreach os,linux darwin,$(shell GOOS=$(os) $(GO) list -deps -f '{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}' ./cmd/dispatch-wrapper 2>/dev/null)))
WRAPPER_INPUTS := $(filter-out %_test.go,$(foreach d,$(WRAPPER_DIRS),$(wildcard $(d)/*.go))) go.mod go.sum
WRAPPER_VERSION := $(VERSION)-$(shell cat $(WRAPPER_INPUTS) | sha256sum | cut -c1-10)
WRAPPER_LDFLAGS := -s -w -X github.com/dispatch-tool/dispatch/wrapper.Version=$(WRAPPER_VERSION)
DEMO     := $(CURDIR)/.demo

PREFIX   ?= $(HOME)/.local
BINDIR   ?= $(PREFIX)/bin

.PHONY: build install wrappers wrapper-inputs demo test lint bench clean

## build: bin/dispatch with the wrappers for all four node platforms embedded (no Go needed to run it)
build: wrappers
	$(GO) build -tags embedwrappers -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN) ./cmd/dispatch
	@echo "built $(BIN) (wrapper $(WRAPPER_VERSION))"

## install: build, then copy bin/dispatch to $(DESTDIR)$(BINDIR) (default ~/.local/bin; PREFIX=/usr/local for all users)
install: build
	@mkdir -p "$(DESTDIR)$(BINDIR)"
	install -m 0755 $(BIN) "$(DESTDIR)$(BINDIR)/dispatch"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "note: $(BINDIR) is not on your PATH; add it: export PATH=\"$(BINDIR):\$$PATH\"";; esac

# wrapper-inputs: the files the wrapper version hashes (one per line)
wrapper-inputs:
	@printf '%s\n' $(WRAPPER_INPUTS)

wrappers:
	@rm -rf nodes/wrappers && mkdir -p nodes/wrappers
	@for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "wrapper $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(WRAPPER_LDFLAGS)" \
	    -o nodes/wrappers/dispatch-wrapper-$$os-$$arch ./cmd/dispatch-wrapper || exit 1; \
	done
	@echo "$(WRAPPER_VERSION)" > nodes/wrappers/VERSION

## demo: run specs/demo on the local node in a fresh home (.demo/), then print status and report
demo: build
	@rm -rf $(DEMO) && mkdir -p $(DEMO)/specs
	@cp -R specs/demo $(DEMO)/specs/demo
	@printf '%s\n' \
	  'controller:' \
	  '  poll_interval: 1s' \
	  '  retry_backoff: 2s' \
	  'nodes:' \
	  '  - name: local' \
	  '    ssh: null' \
	  '    slots: 3' \
	  '    work_dir: $(DEMO)/work' > $(DEMO)/nodes.yaml
	@echo "== dispatch start demo (home $(DEMO))"
	@start=$$(date +%s); ./$(BIN) --home $(DEMO) start demo; rc=$$?; \
	  echo "== start exited $$rc after $$(( $$(date +%s) - start ))s"; \
	  echo; echo "== dispatch status demo"; ./$(BIN) --home $(DEMO) status demo; \
	  echo; echo "== dispatch report demo"; ./$(BIN) --home $(DEMO) report demo; exit $$rc

## test: install what the tests need, then vet and run every test with the race detector
## (go test -json through internal/testfmt: go test's own ok/FAIL lines, a line as each
## package starts, and every minute what still runs; the exit status is go test's)
test:
	@./.ci/test-deps
	@echo "== gofmt"; out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@echo "== go vet"; $(GO) vet ./...
	@echo "== go vet for darwin (a node may be a Mac: Linux-only code and tests behind build tags)"; GOOS=darwin $(GO) vet ./...
	@echo "== wrapper builds for every node platform (CGO_ENABLED=0)"; \
	  for p in $(PLATFORMS); do \
	    CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -o /dev/null ./cmd/dispatch-wrapper || exit 1; \
	    echo "  ok $$p"; \
	  done
	@echo "== go test -race: a line as each package starts and ends (ok/FAIL with its time), and every minute what still runs"; \
	  exec 4>&1; \
	  rc=$$( { { $(GO) test -race -count=1 -timeout 20m -json ./... 3>&- 4>&-; echo $$? >&3; } | \
	    $(GO) run ./internal/testfmt >&4 3>&-; } 3>&1 ); \
	  exit $$rc

## bench: SPEC §11 benchmarks on real sshd nodes on loopback, side by side with GNU parallel (installed
## from the system packages when missing); writes bench/RESULTS.md and the profiles in bench/out/.
## About 12 minutes; BENCH_QUICK=1 cuts the repetitions. Not run by `make test`.
bench: build
	@./.ci/test-deps
	$(GO) build -tags embedwrappers -o bin/dispatch-bench ./bench
	./bin/dispatch-bench -dispatch $(BIN) -out bench/RESULTS.md -profiles bench/out -command "make bench"
	@echo "== the dashboard's first read of a 10,000-task run (docs/API.md)"; $(GO) test -run XXX -bench RunPage -benchtime 5x ./httpapi

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...

clean:
	rm -rf bin nodes/wrappers $(DEMO)
