# Kerf's front door. Every target works on a fresh Debian machine as root:
# `make test` and `make demo` install what they need first (`make deps`,
# a no-op once done). `make help` lists the targets: each has a
# `## target: description` line, which help prints.

SHELL := /usr/bin/env bash -o pipefail
GO ?= go
# Test flags: add e.g. TESTFLAGS=-run=TestSmoke.
TESTFLAGS ?=

.PHONY: all help deps generate vmlinux verify-generated build images test unit fuzz bench bench-e2e bench-peers bench-scale bench-scale-recommend bench-quality record-traces lint demo release-plugin test-release clean

## all: the default target, build
all: build

## help: list every target with its description
help:
	@awk '/^## [a-z0-9-]+:/ { sub(/^## /, ""); i = index($$0, ":"); printf "  %-17s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }' $(MAKEFILE_LIST)

## deps: install apt packages, fetch the VM tests' kernel into bin/vm/ and build the control plane into bin/ (idempotent)
deps:
	@hack/apt.sh
	@hack/vmkernel.sh
	@hack/controlplane.sh

## generate: regenerate committed generated code (BPF objects, deepcopy, CRDs, protobuf)
generate:
	$(GO) generate ./bpf/...
	@hack/controller-gen.sh
	@hack/protoc.sh

## vmlinux: refresh bpf/include/vmlinux.h from this kernel's BTF (not part of generate)
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

## verify-generated: fail when the committed generated code differs from what generate makes now
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
# lines: a package such as test/kerneltest is not under ./cgroup/... however
# its name reads).
RACE_PKGS = ./cluster/... ./node/... ./cgroup/... ./api/... ./internal/endpoints/

## test: vet, generated-code drift, unit, kernel, control-plane and end-to-end tests
test: deps
	$(GO) vet ./...
	@hack/verify-generated.sh
	@hack/controlplane.sh --check
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -count=1 -timeout 30m -race $(TESTFLAGS) $(RACE_PKGS)
	@# 60m: the packages that bring up a sandbox take turns (sandbox.Lock),
	@# and one may wait for the whole e2e run (23 min on a loaded machine).
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -count=1 -timeout 60m $(TESTFLAGS) $$($(GO) list ./... | grep -vxF "$$($(GO) list $(RACE_PKGS))")

# UNIT_PKGS are the packages whose tests need no control plane, no root, no
# kernel feature and no Prometheus: make unit runs them in seconds with
# nothing installed. A package joins the list only when all its tests are
# such; the rest run in make test.
UNIT_PKGS = ./api/stream/v1/ ./cluster/policy/ ./cluster/healthwatch/ ./cluster/signals/ ./cluster/resources/ ./cluster/workload/ ./cluster/recommend/ ./cluster/savings/ ./internal/httpjson/ ./internal/kube/ ./cmd/kerf-pause/

## unit: the inner loop: vet and test the pure packages (UNIT_PKGS), no deps needed, seconds
unit:
	$(GO) vet $(UNIT_PKGS)
	$(GO) test -count=1 $(TESTFLAGS) $(UNIT_PKGS)

# FUZZTIME is how long make fuzz runs each fuzzer; FUZZ selects them by
# name (a grep -E pattern). Every `func FuzzX(f *testing.F)` of a _test.go
# file is found; a crash is saved under its package's testdata/fuzz/FuzzX/,
# which plain go test then runs as a regular test (docs/security.md,
# "Fuzzed parsers").
FUZZTIME ?= 30s
FUZZ ?= .

## fuzz: run every fuzzer (func FuzzX) for FUZZTIME (default 30s) each, one at a time; FUZZ=pattern selects some
fuzz: deps
	@set -e; for f in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
	  for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f | grep -E -- '$(FUZZ)'); do \
	    echo "== $$fn ./$$(dirname $$f)/ for $(FUZZTIME)"; \
	    KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) $(TESTFLAGS) ./$$(dirname $$f)/; \
	  done; \
	done

## bench: benchmarks (figures, never pass/fail); the sandbox's are in bench-e2e
bench: deps
	$(GO) test -run='^$$' -bench=. -benchmem $(TESTFLAGS) $$($(GO) list ./... | grep -v /test/e2e)

## bench-e2e: kernel OOM kill → rollback on the real sandbox cluster: agent and kubelet-status paths on the cgroup v1 node, agent path on the cgroup v2 VM node, each agent's CPU and RSS (about 20 minutes)
bench-e2e: deps
	KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -bench=OOMKillToRollback -benchtime=1x -timeout 60m -v ./test/e2e/

## bench-peers: the agent against cadvisor on the same 330 cgroups, one Prometheus scraping both at 1 s and 15 s (docs/performance.md, about 15 minutes)
bench-peers: deps
	KERF_BENCH_PEERS=1 KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -bench=AgentAgainstCadvisor -benchtime=1x -timeout 30m -v $(TESTFLAGS) ./test/peers/

## bench-scale: the leader (real binary) at 25,000 workloads, 1,000 simulated nodes' agent streams on the real control plane (docs/performance.md; KERF_SCALE_WORKLOADS, KERF_SCALE_NODES scale it)
bench-scale: deps
	KERF_BENCH_SCALE=1 KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -bench=LeaderAtScale -benchtime=1x -timeout 90m -v $(TESTFLAGS) ./test/scale/

## bench-scale-recommend: bench-scale with spec.recommend on for every workload, the simulated agents' usage feeding the recommender: its pass time and writes, the leader's RSS and CPU, the rollbacks during its wave (docs/performance.md)
bench-scale-recommend: deps
	KERF_BENCH_SCALE=1 KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^$$' -bench=LeaderRecommendingAtScale -benchtime=1x -timeout 150m -v $(TESTFLAGS) ./test/scale/

## bench-quality: Kerf's changes against VPA's recommender, KRR's percentile and the manifest on nine generated usage traces, no cluster: slack, OOM kills, throttling, changes, rollbacks and the plot docs/quality-weekly.svg, with the traces record-traces recorded (docs/performance.md, seconds; KERF_QUALITY_TRACES=dir adds more)
bench-quality:
	KERF_BENCH_QUALITY=1 $(GO) test -run='^$$' -bench=Quality -benchtime=1x -timeout 30m -v $(TESTFLAGS) ./test/quality/

## record-traces: drive two real workloads on the sandbox for ten minutes and record what the agent reads as traces into test/quality/testdata/recorded/, which bench-quality replays (docs/performance.md)
record-traces: deps
	KERF_RECORD_TRACES=$(CURDIR)/test/quality/testdata/recorded KERF_REQUIRE_CONTROLPLANE=1 $(GO) test -run='^TestRecordTraces$$' -count=1 -timeout 30m -v ./test/e2e/

## lint: gofmt, go vet, staticcheck (pinned in go.mod, run with go tool)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

## demo: a real two-node cluster (this machine's cgroup v1 node, a cgroup v2 VM node), Kerf installed from manifests/, six real rollbacks narrated (one on the v2 node, the last after a recommender decrease); Ctrl-C tears it down
demo: deps build
	bin/kerf-sandbox demo

## release-plugin: kubectl-kerf for linux/darwin on amd64/arm64, krew's archives (with LICENSE), checksums.txt and the krew manifest kerf.yaml into bin/release/ (VERSION=vX.Y.Z)
release-plugin:
	$(GO) run hack/release-plugin.go -version "$(VERSION)" -out bin/release

## test-release: the plugin release's test (four cross-builds of kubectl-kerf, minutes on a cold cache: not in make test)
test-release:
	KERF_TEST_RELEASE=1 $(GO) test -count=1 -timeout 40m -run TestRelease ./plugins/

## clean: remove what build and images write (bin/kerf-*, bin/images/); deps' control plane stays
clean:
	rm -f bin/kerf-agent bin/kerf-leader bin/kerf-sandbox
	rm -rf bin/images
