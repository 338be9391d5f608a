#!/usr/bin/env bash
# Regenerates the Go code of the agent-to-leader stream protocol
# (api/stream/v1/stream.pb.go and stream_grpc.pb.go beside stream.proto)
# with Debian's protoc (hack/apt.sh installs it) and the Go plugins, pinned
# as go.mod tool directives and run through `go tool`. Run by `make
# generate`. The output depends only on the sources and the versions (protoc
# runs from the repository root on relative paths): a second run, or a run
# from another checkout, changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
# The generated files name the protoc version in their header; Debian
# bookworm's protobuf-compiler is the one the committed files come from.
PROTOC_VERSION=${PROTOC_VERSION:-libprotoc 3.21.12}

if ! command -v protoc >/dev/null; then
	echo "protoc not found: run 'make deps' (hack/apt.sh installs protobuf-compiler)" >&2
	exit 1
fi
have=$(protoc --version)
if [ "$have" != "$PROTOC_VERSION" ]; then
	echo "protoc is '$have', want '$PROTOC_VERSION' (Debian bookworm's protobuf-compiler); the generated headers would differ" >&2
	exit 1
fi

# The plugins' versions are go.mod's: protoc-gen-go is the protobuf runtime's
# own module, so the generated code and the library it calls never disagree.
# `go tool -n` builds a tool once (Go's cache) and prints its path.
gen_go=$("$GO" tool -n protoc-gen-go)
gen_go_grpc=$("$GO" tool -n protoc-gen-go-grpc)

protoc \
	--proto_path=. \
	--plugin=protoc-gen-go="$gen_go" \
	--plugin=protoc-gen-go-grpc="$gen_go_grpc" \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	api/stream/v1/stream.proto
