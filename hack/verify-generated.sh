#!/usr/bin/env bash
# Fails when the generated files in the tree (bpf2go output, deepcopy, CRDs,
# protobuf) differ from what `make generate` makes from their sources now.
# It compares the tree before and after regenerating, so it works the same
# on a fresh clone (CI) and on a working copy with uncommitted edits.
set -euo pipefail
cd "$(dirname "$0")/.."

generated() {
	local dirs=()
	for d in bpf api manifests/crd; do [ -d "$d" ] && dirs+=("$d"); done
	[ ${#dirs[@]} -gt 0 ] || return 0
	find "${dirs[@]}" \( -name '*_bpfel.go' -o -name '*_bpfel.o' \
		-o -name 'zz_generated*.go' -o -name '*.pb.go' -o -path 'manifests/crd/*.yaml' \) \
		-type f 2>/dev/null | LC_ALL=C sort | xargs -r sha256sum
}

before=$(generated)
make --no-print-directory generate >/dev/null
after=$(generated)
if [ "$before" != "$after" ]; then
	diff <(echo "$before") <(echo "$after") >&2 || true
	echo "generated files are out of date: run 'make generate' and commit the result" >&2
	exit 1
fi
echo "generated files: up to date"
