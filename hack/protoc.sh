#!/usr/bin/env bash
# Regenerates the Go code of the agent-to-leader stream protocol
# (api/stream/v1/stream.pb.go and stream_grpc.pb.go beside stream.proto)
# with Debian's protoc (hack/apt.sh installs it) and the Go plugins, pinned
# and built through the Go module proxy into bin/.tools/, one directory per
# version. Run by `make generate`. The output depends only on the sources
# and the versions (protoc runs from the repository root on relative paths):
# a second run, or a run from another checkout, changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
# protoc-gen-go follows the protobuf runtime in go.mod, so the generated code
# and the library it calls never disagree.
PROTOC_GEN_GO_VERSION=${PROTOC_GEN_GO_VERSION:-$("$GO" list -m -f '{{.Version}}' google.golang.org/protobuf)}
PROTOC_GEN_GO_GRPC_VERSION=${PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}
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

# tool MODULE/PATH VERSION: builds the plugin once per version and prints its path.
tool() {
	local pkg=$1 version=$2 name dir
	name=$(basename "$pkg")
	dir=bin/.tools/$name-$version
	if [ ! -x "$dir/$name" ]; then
		mkdir -p "$dir"
		GOBIN=$PWD/$dir "$GO" install "$pkg@$version"
	fi
	echo "$PWD/$dir/$name"
}
gen_go=$(tool google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION")
gen_go_grpc=$(tool google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION")

protoc \
	--proto_path=. \
	--plugin=protoc-gen-go="$gen_go" \
	--plugin=protoc-gen-go-grpc="$gen_go_grpc" \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	api/stream/v1/stream.proto
