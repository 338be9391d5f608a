# Kerf's front door. Every target works on a fresh Debian machine as root:
# `make test` and `make demo` install what they need first (`make deps`,
# a no-op once done).

SHELL := /usr/bin/env bash -o pipefail
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
# Test flags: add e.g. TESTFLAGS=-run=TestSmoke.
TESTFLAGS ?=

.PHONY: all deps generate vmlinux verify-generated build images test unit bench bench-e2e lint demo clean

all: build

## deps: install apt packages and build the control plane into bin/ (idempotent)
deps:
	@hack/apt.sh
	@hack/controlplane.sh

## generate: regenerate committed generated code (BPF objects, deepcopy, CRDs, protobuf)
generate:
	$(GO) generate ./bpf/...
	@hack/controller-gen.sh
	@hack/protoc.sh

## vmlinux: refresh bpf/include/vmlinux.h from this kernel's BTF (not part of generate)
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

verify-generated:
	@hack/verify-generated.sh

## build: static binaries into bin/ (the Dockerfile runs the same script)
build:
	@hack/build.sh bin

## images: image archives (docker-archive, no Docker) into bin/images/ for `ctr images import`
images:
	$(GO) run hack/images.go bin/images

# RACE_PKGS run under the race detector in make test: the leader, the agent,
# the cgroup layer, the API. The rest runs without it: the BPF tests' victim
# processes have a memory limit the race runtime's shadow memory overruns,
# and the sandbox and end-to-end tests mostly wait on real clusters. The
# second run takes every package go list does not name for the first (whole
# lines: test/cgrouptest is not under ./cgroup/...).
RACE_PKGS = ./cluster/... ./node/... ./cgroup/... ./api/... ./internal/endpoints/

## test: vet, generated-code drift, unit, kernel, control-plane and end-to-end tests
test: deps
	$(GO) vet ./...
	@hack/verify-generated.sh
	@hack/controlplane.sh --check
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -count=1 -timeout 30m -race $(TESTFLAGS) $(RACE_PKGS)
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -count=1 -timeout 30m $(TESTFLAGS) $$($(GO) list ./... | grep -vxF "$$($(GO) list $(RACE_PKGS))")

## bench: benchmarks (figures, never pass/fail); the sandbox's are in bench-e2e
bench: deps
	$(GO) test -run='^$$' -bench=. -benchmem $(TESTFLAGS) $$($(GO) list ./... | grep -v /test/e2e)

## bench-e2e: kernel OOM kill → rollback on the real sandbox cluster, agent path and kubelet-status path (about 10 minutes)
bench-e2e: deps
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -bench=OOMKillToRollback -benchtime=1x -timeout 45m -v ./test/e2e/

## lint: gofmt, go vet, staticcheck (pinned, through the module proxy)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## demo: a real one-node cluster, Kerf installed from manifests/, four real rollbacks narrated; Ctrl-C tears it down
demo: deps build
	bin/kerf-sandbox demo

clean:
	rm -f bin/kerf-agent bin/kerf-leader bin/kerf-sandbox
