# obmd — see README.md. Two commands for a newcomer: `make run`, `make test`.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin
# Fuzz targets run briefly in `make test` (longer by hand: make fuzz FUZZTIME=5000000x).
# A count, not a duration: see .ci/fuzz.
FUZZTIME ?= 100000x

.PHONY: run build test short unit fuzz lint bench clean

## run: obmd on SQLite in ./obmd-state with a demo node on the built-in simulator
run: build
	$(BIN)/obmd serve --demo

## build: bin/obmd and bin/obmctl
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## test: lint, every test with the race detector, then each fuzz target briefly
test: lint unit fuzz

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

## short: the fast tier for the edit-test loop: every test that needs no program or server outside Go
short:
	$(GO) test -short -count=1 ./...

fuzz:
	@./.ci/fuzz $(FUZZTIME)

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	  if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## bench: regenerate BENCHMARKS.md (see bench/README.md for what it needs)
bench:
	$(GO) run ./bench -out BENCHMARKS.md

clean:
	rm -rf $(BIN)
